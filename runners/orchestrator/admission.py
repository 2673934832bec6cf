"""Claiming a queued run (synchronous: the Celery task thread does it before handing the run to the loop).

The claim is one conditional UPDATE — `queued → running` with a fresh lease token, expiry, attempt
count, start time, deadline and the frozen authorization snapshot — so of two deliveries of the same
task (or two workers) exactly one wins and the other returns without doing anything. Under the `queue`
policy the UPDATE also requires that no earlier run of the same binding and conversation is still
active; the run that ends sends the next one.

A run whose runner or binding has gone (or whose context cannot be built) is not handed to the runtime:
the same conditional update ends it `failed` with `runner.not_found` / `binding.not_found` /
`context.invalid`.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from bindings.policies import ConcurrencyPolicy
from langbot_sdk.protocol import RunFailureCode
from runners.models import Run, RunnerDescriptor
from runners.orchestrator.context import BuiltContext, context_build
from runners.publish import run_status_publish_on_commit
from runners.services import run_dispatch_next_on_commit

logger = logging.getLogger(__name__)


@dataclass
class ClaimedRun:
    run: Run
    built: BuiltContext
    lease_token: str


def _earlier_active(run: Run) -> Exists:
    return Exists(
        Run.objects.filter(
            workspace_id=run.workspace_id,
            conversation_id=run.conversation_id,
            binding_id=run.binding_id,
            status__in=Run.ACTIVE_STATUSES,
            id__lt=OuterRef("id"),
        )
    )


def _fail_unstarted(run: Run, *, code: str, message: str, details: dict[str, Any]) -> None:
    now = timezone.now()
    error = {"code": code, "message": message, "retryable": False, "details": details}
    with transaction.atomic():
        ended = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
            status=Run.Status.FAILED,
            status_reason=code,
            error=error,
            attempts=F("attempts") + 1,
            started_at=now,
            finished_at=now,
        )
        if ended:
            run.status, run.status_reason, run.error = Run.Status.FAILED, code, error
            run_status_publish_on_commit(run=run)
            run_dispatch_next_on_commit(run=run)
            logger.warning("run %s failed before starting: %s", run.run_id, message)


def run_claim(*, run_id: str, owner: str, lease_seconds: float) -> ClaimedRun | None:
    """Claim the run for this worker, or return None when there is nothing to do (already claimed or
    finished, waiting behind an earlier run, unknown id, or failed here before starting)."""
    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        logger.warning("ignored run_execute for a malformed run id %r", run_id)
        return None
    run = (
        Run.objects.select_related("event", "binding", "bot", "workspace")
        .filter(run_id=key, status=Run.Status.QUEUED)
        .first()
    )
    if run is None:
        return None
    binding = run.binding
    if binding is None:
        _fail_unstarted(
            run,
            code="binding.not_found",
            message="the run's binding was deleted",
            details={"binding_id": run.binding_key},
        )
        return None
    descriptor = RunnerDescriptor.objects.filter(runner_id=run.runner_id).first()
    if descriptor is None or descriptor.status != RunnerDescriptor.Status.AVAILABLE:
        reason = "is not known" if descriptor is None else f"is {descriptor.status}"
        if descriptor is not None and descriptor.load_error:
            reason += f": {descriptor.load_error}"
        _fail_unstarted(
            run,
            code=RunFailureCode.RUNNER_NOT_FOUND.value,
            message=f"runner {run.runner_id} {reason}",
            details={"runner_id": run.runner_id},
        )
        return None

    now = timezone.now()
    deadline_at = now + timedelta(seconds=run.timeout_seconds)
    try:
        built = context_build(run=run, event=run.event, binding=binding, descriptor=descriptor, deadline_at=deadline_at)
    except (ValueError, TypeError) as exc:
        _fail_unstarted(
            run, code=RunFailureCode.CONTEXT_INVALID.value, message=str(exc)[:500], details={"runner_id": run.runner_id}
        )
        return None

    token = uuid.uuid4()
    claim = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED)
    if run.conversation_id and binding.concurrency_policy == ConcurrencyPolicy.QUEUE.value:
        claim = claim.exclude(_earlier_active(run))
    authorization = built.session.authorization()
    claimed = claim.update(
        status=Run.Status.RUNNING,
        lease_owner=owner[:200],
        lease_token=token,
        lease_expires_at=now + timedelta(seconds=lease_seconds),
        attempts=F("attempts") + 1,
        started_at=now,
        deadline_at=deadline_at,
        authorization=authorization,
    )
    if not claimed:
        return None
    run.status = Run.Status.RUNNING
    run.lease_owner, run.lease_token = owner[:200], token
    run.started_at, run.deadline_at, run.authorization = now, deadline_at, authorization
    run.attempts += 1
    built.session.lease_token = str(token)
    return ClaimedRun(run=run, built=built, lease_token=str(token))
