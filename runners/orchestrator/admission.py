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
`context.invalid`.
"""

from __future__ import annotations

import functools
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from bindings.policies import ConcurrencyPolicy
from langbot_host.core.sql import (
    ModelColumns,
    column,
    prep,
    sql_execute,
    sql_fetchall,
    sql_fetchone,
    sql_text_literals,
    table,
)
from langbot_sdk.protocol import RunFailureCode
from runners.lifecycle.services import run_dispatch_next_on_commit
from runners.live.publish import run_status_publish_on_commit
from runners.models import Run
from runners.orchestrator.context import BuiltContext, context_build, context_state_set
from transcripts.models import EventLog, TranscriptItem
from transcripts.state import (
    state_snapshot,
    state_snapshot_fold,
    state_snapshot_params,
    state_snapshot_select,
)

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
            run_status_publish_on_commit(run=run)
            run_dispatch_next_on_commit(run=run)
            logger.warning("run %s failed before starting: %s", run.run_id, message)


_RUN = ModelColumns(Run, "r")
_EVENT = ModelColumns(EventLog, "e")
_WORKSPACE = ModelColumns(Workspace, "w")
_BINDING = ModelColumns(AgentBinding, "b")
_BOT = ModelColumns(Bot, "bt")
# The manifest is parsed once per digest (`descriptor_manifest`) and the other JSON columns are not used
# by a run: decoding them per run cost more than the rest of the row.
_DESCRIPTOR = ModelColumns(
    RunnerDescriptor,
    "d",
    defer=("label", "description", "capabilities", "permissions", "context_policy", "config_schema", "manifest"),
)
_PARTS: tuple[ModelColumns[Any], ...] = (_RUN, _EVENT, _WORKSPACE, _BINDING, _BOT, _DESCRIPTOR)
_STATUS_INDEX = _RUN.attnames.index("status")


@functools.cache
def _load_sql() -> str:
    """The queued run with everything its context needs, in one statement: event, workspace, binding,
    bot, runner descriptor and the two transcript handles (the current input item and the newest item
    before it; both indexed lookups with a LIMIT, whatever the conversation's length)."""
    t, r = table(TranscriptItem), "r"
    t_id, t_ws, t_conv = (
        column(TranscriptItem, "id"),
        column(TranscriptItem, "workspace"),
        column(TranscriptItem, "conversation_id"),
    )
    user = TranscriptItem.Role.USER.value
    current = (
        f"(SELECT t1.{t_id} FROM {t} t1 WHERE t1.{column(TranscriptItem, 'event')} = {r}.{column(Run, 'event')}"
        f" AND t1.{column(TranscriptItem, 'role')} = '{user}' ORDER BY t1.{t_id} LIMIT 1)"
    )
    # The newest item before the current one is the largest (workspace, conversation, id) below
    # (run's workspace, run's conversation, current item), if it is in the same conversation. Written as
    # a row comparison with no other condition, only a backward scan of the cursor index answers it, so
    # that index is the plan even before the table has statistics (a plan that scans the workspace index
    # and filters grows with the workspace).
    latest = (
        f"(SELECT x.{t_id} FROM (SELECT t2.{t_ws}, t2.{t_conv}, t2.{t_id} FROM {t} t2"
        f" WHERE (t2.{t_ws}, t2.{t_conv}, t2.{t_id})"
        f" < ({r}.{column(Run, 'workspace')}, {r}.{column(Run, 'conversation_id')},"
        f" COALESCE({current}, 9223372036854775807))"
        f" ORDER BY t2.{t_ws} DESC, t2.{t_conv} DESC, t2.{t_id} DESC LIMIT 1) x"
        f" WHERE x.{t_ws} = {r}.{column(Run, 'workspace')} AND x.{t_conv} = {r}.{column(Run, 'conversation_id')})"
    )
    return (
        f"SELECT {', '.join(part.select for part in _PARTS)}, {current}, {latest}"
        f" FROM {table(Run)} r"
        f" JOIN {table(EventLog)} e ON e.{column(EventLog, 'id')} = r.{column(Run, 'event')}"
        f" JOIN {table(Workspace)} w ON w.{column(Workspace, 'id')} = r.{column(Run, 'workspace')}"
        f" LEFT JOIN {table(AgentBinding)} b ON b.{column(AgentBinding, 'id')} = r.{column(Run, 'binding')}"
        f" LEFT JOIN {table(Bot)} bt ON bt.{column(Bot, 'id')} = r.{column(Run, 'bot')}"
        f" LEFT JOIN {table(RunnerDescriptor)} d"
        f" ON d.{column(RunnerDescriptor, 'runner_id')} = r.{column(Run, 'runner_id')}"
        f" WHERE r.{column(Run, 'run_id')} = %s"
    )


def _run_load(key: uuid.UUID) -> tuple[Run, RunnerDescriptor | None, tuple[int | None, int | None]] | None:
    # By run id only (the unique index); the status is checked here: a run that is not queued has
    # nothing to claim, and the claim UPDATE checks the status again.
    row = sql_fetchone(_load_sql(), [prep(Run, "run_id", key)])
    if row is None or row[_STATUS_INDEX] != Run.Status.QUEUED.value:
        return None
    objects: list[Any] = []
    start = 0
    for part in _PARTS:
        objects.append(part.load(row[start : start + len(part)]))
        start += len(part)
    run, event, workspace, binding, bot, descriptor = objects
    for name, value in (("event", event), ("workspace", workspace), ("binding", binding), ("bot", bot)):
        Run._meta.get_field(name).set_cached_value(run, value)  # type: ignore[union-attr]
    return run, descriptor, (row[start], row[start + 1])


@functools.cache
def _claim_sql(*, queue_policy: bool) -> str:
    c = functools.partial(column, Run)
    sql = (
        f"UPDATE {table(Run)} SET {c('status')} = %s, {c('lease_owner')} = %s, {c('lease_token')} = %s,"
        f" {c('lease_expires_at')} = %s, {c('attempts')} = {c('attempts')} + 1, {c('started_at')} = %s,"
        f" {c('deadline_at')} = %s, {c('authorization')} = %s"
        f" WHERE {c('id')} = %s AND {c('status')} = %s"
    )
    if queue_policy:
        # Under `queue`, an earlier active run of the same binding and conversation goes first. The
        # statuses are literals so that `run_active_idx` answers it.
        sql += (
            f" AND NOT EXISTS (SELECT 1 FROM {table(Run)} o WHERE o.{c('workspace')} = %s"
            f" AND o.{c('conversation_id')} = %s AND o.{c('binding')} = %s"
            f" AND o.{c('status')} IN ({sql_text_literals(Run.ACTIVE_STATUSES)}) AND o.{c('id')} < %s)"
        )
    return sql


@functools.cache
def _claim_with_state_sql(*, queue_policy: bool) -> str:
    """The claim UPDATE and the state snapshot of the run's context in one round trip: no row when the
    claim did not happen, else one row per state entry (or one row of NULLs when there is none)."""
    return (
        f"WITH claimed AS ({_claim_sql(queue_policy=queue_policy)} RETURNING {column(Run, 'id')})"
        f" SELECT st.* FROM claimed LEFT JOIN LATERAL ({state_snapshot_select('se')}) st ON TRUE"
    )


def _claim(run: Run, params: list[Any], *, queue_policy: bool, built: BuiltContext) -> bool:
    """Run the claim; on success the context gets its state snapshot (read in the same statement on
    PostgreSQL, so the claim costs one round trip with or without state)."""
    keys = built.state_keys
    if not keys:
        if not sql_execute(_claim_sql(queue_policy=queue_policy), params):
            return False
        context_state_set(built, {})
        return True
    if connection.vendor == "postgresql":
        state_params = state_snapshot_params(workspace_id=run.workspace_id, scope_keys=keys)
        rows = sql_fetchall(_claim_with_state_sql(queue_policy=queue_policy), [*params, *state_params])
        if not rows:
            return False
        context_state_set(built, state_snapshot_fold(rows, keys))
        return True
    if not sql_execute(_claim_sql(queue_policy=queue_policy), params):
        return False
    context_state_set(built, state_snapshot(workspace_id=run.workspace_id, scope_keys=keys))
    return True


def run_claim(*, run_id: str, owner: str, lease_seconds: float) -> ClaimedRun | None:
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
    run, descriptor, handles = loaded
    binding = run.binding
    if binding is None:
        _fail_unstarted(
            run,
            code="binding.not_found",
            message="the run's binding was deleted",
            details={"binding_id": run.binding_key},
        )
        return None
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
        built = context_build(
            run=run,
            event=run.event,
            binding=binding,
            descriptor=descriptor,
            deadline_at=deadline_at,
            handles=handles,
            read_state=False,
        )
    except (ValueError, TypeError) as exc:
        _fail_unstarted(
            run, code=RunFailureCode.CONTEXT_INVALID.value, message=str(exc)[:500], details={"runner_id": run.runner_id}
        )
        return None

    token = uuid.uuid4()
    queue_policy = bool(run.conversation_id) and binding.concurrency_policy == ConcurrencyPolicy.QUEUE.value
    authorization = built.session.authorization()
    lease_owner = owner[:200]
    params: list[Any] = [
        Run.Status.RUNNING.value,
        lease_owner,
        prep(Run, "lease_token", token),
        prep(Run, "lease_expires_at", now + timedelta(seconds=lease_seconds)),
        prep(Run, "started_at", now),
        prep(Run, "deadline_at", deadline_at),
        prep(Run, "authorization", authorization),
        run.pk,
        Run.Status.QUEUED.value,
    ]
    if queue_policy:
        params += [run.workspace_id, run.conversation_id, run.binding_id, run.pk]
    if not _claim(run, params, queue_policy=queue_policy, built=built):
        return None
    run.status = Run.Status.RUNNING
    run.lease_owner, run.lease_token = lease_owner, token
    run.started_at, run.deadline_at, run.authorization = now, deadline_at, authorization
    run.attempts += 1
    built.session.lease_token = str(token)
    return ClaimedRun(run=run, built=built, lease_token=str(token))
