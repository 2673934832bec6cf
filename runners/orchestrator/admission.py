"""Claiming a queued run (synchronous: the Celery task thread does it before handing the run to the loop).

The claim is one conditional UPDATE — `queued → running` with a fresh lease token, expiry, attempt
count, start time, deadline and the frozen authorization snapshot — so of two deliveries of the same
task (or two workers) exactly one wins and the other returns without doing anything. Under the `queue`
policy the UPDATE also requires that no earlier run of the same binding and conversation is still
active; the run that ends sends the next one.

Before it, one prepared statement reads the queued run together with everything its context needs
(event, workspace, binding, bot, runner descriptor, the two transcript handles); the claim UPDATE is a
prepared statement too. Both are hand-written because building ORM queries cost more than running them.

A run whose runner or binding has gone (or whose context cannot be built) is not handed to the runtime:
the same conditional update ends it `failed` with `runner.not_found` / `binding.not_found` /
`context.invalid`. A run past a budget of its workspace, bot or actor (runners/access/budgets.py) ends
the same way with `quota_exceeded`, and a `run.failed` result saying which budget and when it resets.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from bindings.models import RunnerDescriptor
from bindings.policies import ConcurrencyPolicy
from langbot_sdk.protocol import AgentInput, RunFailureCode
from runners.access.budgets import BudgetExceeded, budget_exceeded
from runners.lifecycle.dispatch import run_dispatch_at
from runners.lifecycle.observers import runs_ended
from runners.lifecycle.services import run_dispatch_next_on_commit, run_waits_its_turn
from runners.live.publish import run_event_publish_on_commit, run_status_publish_on_commit
from runners.metrics import RUN_QUEUE_WAIT
from runners.models import Run, RunEvent
from runners.orchestrator.context import (
    BuiltContext,
    Prefetched,
    context_build,
    context_state_set,
    descriptor_manifest,
)
from runners.sql import (
    RUN_LOAD_FACTS,
    RUN_LOAD_PARTS,
    Claim,
    conversation_positions_take,
    run_claim_with_state,
    run_load,
)
from runners.sql import run_claim as run_claim_statement
from transcripts.models import EventLog
from transcripts.sql import state_snapshot as state_snapshot_statement
from transcripts.state import state_snapshot, state_snapshot_fold

logger = logging.getLogger(__name__)


@dataclass
class ClaimedRun:
    run: Run
    built: BuiltContext
    lease_token: str


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
            run.started_at = run.finished_at = now
            run_status_publish_on_commit(run=run)
            runs_ended(runs=[run])
            run_dispatch_next_on_commit(run=run)
            logger.warning("run %s failed before starting: %s", run.run_id, message)


def _refuse_over_budget(
    run: Run, exceeded: BudgetExceeded, on_refused: Callable[[Run, list[RunEvent]], None] | None
) -> None:
    """End a run that would start past a budget, as `_fail_unstarted` does, with its `run.failed` result
    too: the chat shows that result's message as it arrives, and every client replays it. `on_refused`
    gets the run and that result once committed (the worker hands it to platform delivery, so a chat
    platform's user is told too)."""
    code = RunFailureCode.QUOTA_EXCEEDED.value
    details = exceeded.details()
    with transaction.atomic():
        _fail_unstarted(run, code=code, message=exceeded.message, details=details)
        if run.status != Run.Status.FAILED:
            return  # not queued any more: claimed or ended elsewhere
        position = None
        if run.conversation_id:
            taken = conversation_positions_take(
                workspace_id=run.workspace_id, conversation_id=run.conversation_id, count=1
            ).fetchone()
            position = int(taken[0]) + 1 if taken is not None else None
        data = {"code": code, "message": exceeded.message, "retryable": False, "details": details}
        event = RunEvent.objects.create(run_id=run.pk, seq=1, type="run.failed", data=data, position=position)
        Run.objects.filter(pk=run.pk).update(last_seq=1)
        run.last_seq = 1
        run_event_publish_on_commit(run=run, events=[event])
        if on_refused is not None:
            transaction.on_commit(partial(on_refused, run, [event]))


_STATUS_INDEX = RUN_LOAD_PARTS[0].attnames.index("status")


def _run_load(
    key: uuid.UUID,
) -> tuple[Run, RunnerDescriptor | None, tuple[int | None, int | None], Prefetched, bool] | None:
    # By run id only (the unique index); the status is checked here: a run that is not queued has
    # nothing to claim, and the claim UPDATE checks the status again.
    row = run_load(run_id=key).fetchone()
    if row is None or row[_STATUS_INDEX] != Run.Status.QUEUED.value:
        return None
    objects: list[Any] = []
    start = 0
    for part in RUN_LOAD_PARTS:
        objects.append(part.load(row[start : start + len(part)]))
        start += len(part)
    run, event, workspace, binding, bot, descriptor = objects
    # Assigning a loaded row to a foreign key caches it (no query on `run.event` later) and sets the same
    # id the run already holds; a missing binding or bot was read as NULL, so None keeps it NULL.
    run.event, run.workspace, run.binding, run.bot = event, workspace, binding, bot
    upload_max, released_hold, has_budget = row[start + 2 : start + 2 + len(RUN_LOAD_FACTS)]
    prefetched = Prefetched(upload_max_bytes=upload_max, released_hold=bool(released_hold))
    return run, descriptor, (row[start], row[start + 1]), prefetched, bool(has_budget)


def _claim(claim: Claim, *, built: BuiltContext) -> bool:
    """Run the claim; on success the context gets its state snapshot (read in the same statement on
    PostgreSQL, so the claim costs one round trip with or without state)."""
    keys = built.state_keys
    if not keys:
        if not run_claim_statement(claim).execute():
            return False
        context_state_set(built, {})
        return True
    if connection.vendor == "postgresql":
        state = state_snapshot_statement(workspace_id=claim.run.workspace_id, scope_keys=keys, alias="se")
        rows = run_claim_with_state(claim, state).fetchall()
        if not rows:
            return False
        context_state_set(built, state_snapshot_fold(rows, keys))
        return True
    if not run_claim_statement(claim).execute():
        return False
    context_state_set(built, state_snapshot(workspace_id=claim.run.workspace_id, scope_keys=keys))
    return True


def merged_input(events: list[EventLog]) -> AgentInput:
    """One input made of several messages, in order: their texts joined by newlines, their content parts
    and attachments one after another (the first message's platform chain kept)."""
    inputs = [_event_input(event) for event in events]
    texts = [item.text for item in inputs if item.text]
    return AgentInput(
        text="\n".join(texts) if texts else None,
        contents=[part for item in inputs for part in item.contents],
        attachments=[ref for item in inputs for ref in item.attachments],
        message_chain=inputs[0].message_chain if inputs else None,
    )


def _event_input(event: EventLog) -> AgentInput:
    try:
        return AgentInput.model_validate(event.input or {})
    except ValidationError:
        text = (event.input or {}).get("text") if isinstance(event.input, dict) else None
        return AgentInput(text=text if isinstance(text, str) else None)


def _merged_input_set(run: Run, built: BuiltContext) -> None:
    """Give a claimed `merge` run the input of every message folded into it. Read after the claim: a
    message is folded only into a queued run, so what is stored now is all the run will ever take."""
    folded = Run.objects.filter(pk=run.pk).values_list("input_events", flat=True).first() or []
    run.input_events = list(folded)
    if not folded:
        return
    by_pk = EventLog.objects.in_bulk([pk for pk in folded if isinstance(pk, int)])
    later = [by_pk[pk] for pk in folded if pk in by_pk]
    context = built.context.model_copy(
        update={
            "input": merged_input([run.event, *later]),
            "metadata": {**built.context.metadata, "merged_event_ids": [e.event_id for e in [run.event, *later]]},
        }
    )
    built.context = context
    built.request = {**built.request, "context": context.model_dump(mode="json")}


def run_claim(
    *,
    run_id: str,
    owner: str,
    lease_seconds: float,
    on_refused: Callable[[Run, list[RunEvent]], None] | None = None,
) -> ClaimedRun | None:
    """Claim the run for this worker, or return None when there is nothing to do (already claimed or
    finished, waiting behind an earlier run, unknown id, or failed here before starting)."""
    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        logger.warning("ignored run_execute for a malformed run id %r", run_id)
        return None
    loaded = _run_load(key)
    if loaded is None:
        return None
    run, descriptor, handles, prefetched, has_budget = loaded
    binding = run.binding
    if binding is None:
        _fail_unstarted(
            run,
            code="binding.not_found",
            message="the run's binding was deleted",
            details={"binding_id": run.binding_key},
        )
        return None
    if descriptor is not None and not descriptor.visible_to(run.workspace_id):
        descriptor = None
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
    if run.not_before is not None and run.not_before > now:
        # A `merge` run whose window is still open (this message came early, or a later message moved the
        # window on): sent again for the time it may start.
        run_dispatch_at(run_id=str(run.run_id), eta=run.not_before)
        return None
    deadline_at = now + timedelta(seconds=run.timeout_seconds)
    try:
        built = context_build(
            run=run,
            event=run.event,
            binding=binding,
            descriptor=descriptor,
            deadline_at=deadline_at,
            handles=handles,
            prefetched=prefetched,
            read_state=False,
        )
    except (ValueError, TypeError) as exc:
        _fail_unstarted(
            run, code=RunFailureCode.CONTEXT_INVALID.value, message=str(exc)[:500], details={"runner_id": run.runner_id}
        )
        return None

    # After the context: the scope it names (workspace, bot, actor) is what budgets apply to.
    # A workspace without an enabled budget (the run's load says) has nothing to check.
    exceeded = budget_exceeded(scope=built.session.scope) if has_budget else None
    if exceeded is not None:
        _refuse_over_budget(run, exceeded, on_refused)
        return None

    token = uuid.uuid4()
    queue_policy = run_waits_its_turn(
        run=run, binding=binding, interruptible=descriptor_manifest(descriptor).capabilities.interrupt
    )
    authorization = built.session.authorization()
    lease_owner = owner[:200]
    claim = Claim(
        run=run,
        owner=lease_owner,
        lease_token=token,
        lease_expires_at=now + timedelta(seconds=lease_seconds),
        started_at=now,
        deadline_at=deadline_at,
        authorization=authorization,
        queue_policy=queue_policy,
    )
    if not _claim(claim, built=built):
        return None
    if binding.concurrency_policy == ConcurrencyPolicy.MERGE.value:
        _merged_input_set(run, built)
    RUN_QUEUE_WAIT.labels(run.runner_id).observe(max(0.0, (now - run.created_at).total_seconds()))
    run.status = Run.Status.RUNNING
    run.lease_owner, run.lease_token = lease_owner, token
    run.started_at, run.deadline_at, run.authorization = now, deadline_at, authorization
    run.attempts += 1
    built.session.lease_token = str(token)
    return ClaimedRun(run=run, built=built, lease_token=str(token))
