"""Writes of a running run, awaited by the execution on the worker's loop.

Every write is fenced by the lease: the same transaction first updates the run row on
`(pk, lease_token, status=running)` — advancing `last_seq` and renewing the lease — and rolls back with
`LeaseLostError` when that matched nothing, so a worker that lost its run writes nothing more. RunEvents are
inserted in bulk with host-assigned `seq` values; state updates and artifacts go to their own stores and
are never RunEvents (they are not delivered to clients). The final write also stores the outcome and
the assistant transcript item (at most one per run: a duplicate is ignored by the unique constraint).

The common batch is one statement awaited on the loop (`LoopStatements`); a batch with state updates,
artifacts or action requests is an ORM transaction on the loop's database executor (`statements.executor`).
"""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from bindings.models import Workspace
from foundation.sql import (
    LoopStatements,
)
from langbot_sdk.protocol import ArtifactCreatedPayload
from runners.hostapi.platform_actions import platform_actions_from_results
from runners.lifecycle.observers import runs_ended
from runners.lifecycle.services import run_dispatch, run_dispatch_next_on_commit
from runners.models import Run, RunEvent
from runners.orchestrator.normalizer import Outcome
from runners.sql import RunEnd, conversation_positions_take, ledger_write
from transcripts.models import TranscriptItem
from transcripts.state import state_write

logger = logging.getLogger(__name__)


class LeaseLostError(Exception):
    """The run is no longer this worker's (lease expired and swept, or ended elsewhere)."""


@dataclass
class StateUpdate:
    scope: str
    scope_key: str
    key: str
    value: Any


@dataclass
class ArtifactOutput:
    name: str
    mime_type: str
    content_base64: str | None
    artifact_id: str | None


def artifact_event_data(payload: ArtifactCreatedPayload, artifact_id: str) -> dict[str, Any]:
    """What the run ledger keeps of an `artifact.created` result: its metadata, never the inline bytes."""
    data = payload.model_dump(mode="json", exclude_none=True, exclude={"content_base64"})
    data["artifact_id"] = artifact_id
    if payload.content_base64 is not None and payload.size is None:
        data["size"] = len(base64.b64decode(payload.content_base64))
    return data


@dataclass
class Batch:
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    state: list[StateUpdate] = field(default_factory=list)
    artifacts: list[ArtifactOutput] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events or self.state or self.artifacts)


@dataclass
class AssistantReply:
    text: str
    parts: list[dict[str, Any]]


def _side_effects(run: Run, batch: Batch) -> None:
    for update in batch.state:
        state_write(
            workspace_id=run.workspace_id,
            scope=update.scope,
            scope_key=update.scope_key,
            key=update.key,
            value=update.value,
            run_id=str(run.run_id),
        )
    for artifact in batch.artifacts:
        _artifact_store(run, artifact)
    platform_actions_from_results(run=run, events=batch.events)


def _artifact_store(run: Run, artifact: ArtifactOutput) -> None:
    if artifact.content_base64 is None:
        logger.info("run %s announced existing artifact %s (%s)", run.run_id, artifact.artifact_id, artifact.name)
        return
    try:
        from artifacts.services import artifact_create_from_bytes
    except ImportError:  # pragma: no cover - the artifacts app always ships with the host
        logger.warning("run %s produced artifact %s but no artifact store is installed", run.run_id, artifact.name)
        return
    stored = artifact_create_from_bytes(
        artifact_id=uuid.UUID(artifact.artifact_id) if artifact.artifact_id else None,
        workspace=Workspace(pk=run.workspace_id),
        data=base64.b64decode(artifact.content_base64),
        name=artifact.name,
        mime_type=artifact.mime_type,
        conversation_id=run.conversation_id,
        source="runner",
        event=None,
        run_id=run.run_id,
    )
    logger.info("run %s stored artifact %s (%s, %d bytes)", run.run_id, stored.artifact_id, stored.name, stored.size)


def _event_rows(run: Run, first_seq: int, events: list[tuple[str, dict[str, Any]]]) -> list[RunEvent]:
    if not events:
        return []
    base = None
    if run.conversation_id:
        # Before the insert: the counter row's lock orders the conversation's writers (`ConversationStream`).
        taken = conversation_positions_take(
            workspace_id=run.workspace_id, conversation_id=run.conversation_id, count=len(events)
        ).fetchone()
        assert taken is not None
        base = int(taken[0])
    rows = [
        RunEvent(
            run_id=run.pk, seq=first_seq + i, type=type_, data=data, position=None if base is None else base + 1 + i
        )
        for i, (type_, data) in enumerate(events)
    ]
    return RunEvent.objects.bulk_create(rows)


# --- one-statement writes (PostgreSQL) ---------------------------------------------------------------
#
# The common batch — result events only, no state, artifacts or platform actions — is written by a single
# statement: the fenced run update, the events, (at the end) the assistant transcript item and the lookup
# of the next queued run of the conversation are data-modifying CTEs of one prepared statement, so one
# round trip and one implicit transaction do what the ORM path below does in six.


def _fast_path(batch: Batch) -> bool:
    return (
        connection.vendor == "postgresql"
        and not batch.state
        and not batch.artifacts
        and all(type_ != "action.requested" for type_, _ in batch.events)
    )


async def _ledger_write_fast(
    statements: LoopStatements,
    *,
    run: Run,
    lease_token: str,
    last_seq: int,
    batch: Batch,
    now: datetime,
    lease_expires_at: datetime | None = None,
    end: RunEnd | None = None,
    reply: TranscriptItem | None = None,
) -> list[RunEvent]:
    """The one-statement write; raises `LeaseLostError` (having written nothing) when the lease is gone."""
    statement = ledger_write(
        run=run, lease_token=lease_token, first_seq=last_seq + 1, events=batch.events, now=now,
        lease_expires_at=lease_expires_at, end=end, reply=reply,
    )  # fmt: skip
    rows = await statements.fetchall(statement)
    seqs = range(last_seq + 1, last_seq + 1 + len(batch.events))
    events: list[RunEvent] = []
    by_seq = dict(zip(seqs, batch.events, strict=True))
    following = None
    for kind, a, b, next_run_id, position in rows:
        if kind == "run" and not a:
            raise LeaseLostError()
        if kind == "event":
            type_, data = by_seq[b]
            events.append(
                RunEvent(id=a, run_id=run.pk, seq=b, type=type_, data=data, created_at=now, position=position)
            )
        elif kind == "next":
            following = next_run_id
    if following is not None:
        # The statement has committed (autocommit); sending is a blocking broker call.
        await statements.executor(run_dispatch, run_id=str(following))
    events.sort(key=lambda event: event.seq)
    return events


async def ledger_append(
    statements: LoopStatements,
    *,
    run: Run,
    lease_token: str,
    last_seq: int,
    batch: Batch,
    lease_seconds: float,
) -> list[RunEvent]:
    """Persist results of a run still in progress; returns the RunEvents (ids and seqs set)."""
    now = timezone.now()
    if _fast_path(batch):
        return await _ledger_write_fast(
            statements, run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, now=now,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
        )  # fmt: skip
    return await statements.executor(
        _ledger_append_orm, run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, now=now,
        lease_seconds=lease_seconds,
    )  # fmt: skip


def _ledger_append_orm(
    *, run: Run, lease_token: str, last_seq: int, batch: Batch, now: datetime, lease_seconds: float
) -> list[RunEvent]:
    with transaction.atomic():
        held = Run.objects.filter(pk=run.pk, lease_token=lease_token, status=Run.Status.RUNNING).update(
            last_seq=last_seq + len(batch.events), lease_expires_at=now + timedelta(seconds=lease_seconds)
        )
        if not held:
            raise LeaseLostError()
        _side_effects(run, batch)
        return _event_rows(run, last_seq + 1, batch.events)


async def ledger_finish(
    statements: LoopStatements,
    *,
    run: Run,
    lease_token: str,
    last_seq: int,
    batch: Batch,
    outcome: Outcome,
    output: str,
    reply: AssistantReply | None,
) -> list[RunEvent]:
    """Persist the last results and end the run with `outcome` — one transaction, fenced by the lease."""
    now = timezone.now()
    item = None
    if reply is not None and run.conversation_id and not run.is_observer:
        item = TranscriptItem(
            workspace_id=run.workspace_id,
            conversation_id=run.conversation_id,
            thread_id=run.thread_id,
            role=TranscriptItem.Role.ASSISTANT,
            content=reply.text,
            contents=reply.parts,
            event_id=run.event_id,
            run_id=run.run_id,
            runner_id=run.runner_id,
        )
    if _fast_path(batch):
        end = RunEnd(
            status=outcome.status,
            status_reason=outcome.status_reason,
            error=outcome.error,
            usage=outcome.usage,
            output=output,
        )
        rows = await _ledger_write_fast(
            statements, run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, now=now, end=end,
            reply=item,
        )  # fmt: skip
        _ended(run, outcome=outcome, output=output, now=now)
        # The statement committed on its own; the observers record theirs right after it.
        await statements.executor(runs_ended, runs=[run])
    else:
        rows = await statements.executor(
            _ledger_finish_orm, run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, outcome=outcome,
            output=output, item=item, now=now,
        )  # fmt: skip
    return rows


def _ended(run: Run, *, outcome: Outcome, output: str, now: datetime) -> None:
    run.status, run.status_reason, run.error = outcome.status, outcome.status_reason, outcome.error
    run.usage, run.output, run.finished_at = outcome.usage, output, now


def _ledger_finish_orm(
    *,
    run: Run,
    lease_token: str,
    last_seq: int,
    batch: Batch,
    outcome: Outcome,
    output: str,
    item: TranscriptItem | None,
    now: datetime,
) -> list[RunEvent]:
    with transaction.atomic():
        ended = Run.objects.filter(pk=run.pk, lease_token=lease_token, status=Run.Status.RUNNING).update(
            status=outcome.status,
            status_reason=outcome.status_reason,
            error=outcome.error,
            usage=outcome.usage,
            output=output,
            last_seq=last_seq + len(batch.events),
            finished_at=now,
            lease_expires_at=None,
        )
        if not ended:
            raise LeaseLostError()
        _ended(run, outcome=outcome, output=output, now=now)
        _side_effects(run, batch)
        rows = _event_rows(run, last_seq + 1, batch.events)
        if item is not None:
            TranscriptItem.objects.bulk_create([item], ignore_conflicts=True)
        run_dispatch_next_on_commit(run=run)
        runs_ended(runs=[run])
    return rows


def leases_renew(*, tokens: dict[int, str], lease_seconds: float) -> dict[int, tuple[bool, str]]:
    """Renew the leases this worker holds in one update; returns, for each run still held, whether a
    cancel was requested (and why). A run missing from the answer is lost."""
    now = timezone.now()
    held = Run.objects.filter(pk__in=list(tokens), lease_token__in=list(tokens.values()), status=Run.Status.RUNNING)
    held.update(lease_expires_at=now + timedelta(seconds=lease_seconds))
    rows = held.values_list("pk", "lease_token", "cancel_requested_at", "cancel_reason")
    return {pk: (requested is not None, reason) for pk, token, requested, reason in rows if str(token) == tokens[pk]}
