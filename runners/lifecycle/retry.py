"""Automatic retry of runs lost to a host-side fault, for bindings that opt in (`delivery_policy.retry`).

A run-end observer (`runs_retry`, registered by `RunnersConfig.ready`): a run that ended `failed` with a
retryable fault of the host's side — the plugin runtime died under it, its worker was lost or shut down —
gets a new queued run of the same event and binding, started after the policy's backoff (doubling per
attempt), until the event has `max_attempts` runs of that binding. The runner's own failures
(`runner.*`), timeouts, cancels and rejections are never retried: running them again would not help.

No column links the attempts: the runs of one event and binding are its attempts, in id order (the
resolver creates one run per binding and event). `run_attempt` reads the attempt number and the run it
retried from that, for REST and admin.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from celery import current_app
from django.db import transaction

from bindings.policies import DeliveryPolicy
from foundation.sql import insert
from runners.lifecycle.dispatch import RUN_EXECUTE_TASK
from runners.live.publish import run_status_publish_on_commit
from runners.models import Run

logger = logging.getLogger(__name__)

# Faults of the host's side, after which the same run may well succeed.
RETRIED_CODES = frozenset({"runtime_error", "worker_lost", "worker_shutdown"})


@dataclass(frozen=True)
class RunAttempt:
    number: int
    """1 for the event's first run of the binding, 2 for its first retry, ..."""
    retry_of: str | None
    """The run this one retried (the previous attempt), if any."""


def _attempts(run: Run) -> list[Run]:
    return list(
        Run.objects.filter(event_id=run.event_id, binding_key=run.binding_key, workspace_id=run.workspace_id)
        .order_by("id")
        .only("id", "run_id")
    )


def run_attempt(*, run: Run) -> RunAttempt:
    earlier = [attempt for attempt in _attempts(run) if attempt.pk < run.pk]
    return RunAttempt(number=len(earlier) + 1, retry_of=str(earlier[-1].run_id) if earlier else None)


def _retryable(run: Run) -> bool:
    error = run.error or {}
    return run.status == Run.Status.FAILED and bool(error.get("retryable")) and error.get("code") in RETRIED_CODES


def runs_retry(runs: Sequence[Run]) -> None:
    """The run-end observer: queue the next attempt of each run that may be retried."""
    for run in runs:
        if not _retryable(run) or run.binding_id is None:
            continue
        binding = run.binding
        if binding is None or not binding.enabled:
            continue
        policy = DeliveryPolicy.model_validate(binding.delivery_policy or {}).retry
        if policy is None:
            continue
        attempts = _attempts(run)
        if len(attempts) >= policy.max_attempts or attempts[-1].pk != run.pk:
            continue  # out of attempts, or this failure was already retried
        retry = Run(
            workspace_id=run.workspace_id,
            event_id=run.event_id,
            binding=binding,
            binding_key=run.binding_key,
            runner_id=binding.runner_id,
            bot_id=run.bot_id,
            conversation_id=run.conversation_id,
            thread_id=run.thread_id,
            is_observer=run.is_observer,
            timeout_seconds=binding.timeout_seconds,
        )
        insert(retry)
        delay = policy.backoff_seconds * 2 ** (len(attempts) - 1)
        run_status_publish_on_commit(run=retry)
        retry_id = str(retry.run_id)
        transaction.on_commit(functools.partial(_dispatch_later, retry_id, delay))
        logger.info(
            "run %s failed (%s); retrying as run %s (attempt %d of %d) in %.1f s",
            run.run_id, (run.error or {}).get("code"), retry_id, len(attempts) + 1, policy.max_attempts, delay,
        )  # fmt: skip


def _dispatch_later(run_id: str, delay: float) -> None:
    """Wake a worker after the backoff. A lost message is not fatal: `runs_sweep` re-sends stale runs."""
    try:
        current_app.send_task(RUN_EXECUTE_TASK, args=[run_id], countdown=delay or None)
    except Exception:
        logger.warning("could not send retry run %s to the broker; the sweeper will re-send it", run_id, exc_info=True)
