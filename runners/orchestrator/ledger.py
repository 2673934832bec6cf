"""Writes of a running run, awaited by the execution on the worker's loop.

Every write is fenced by the lease: the same transaction first updates the run row on
`(pk, lease_token, status=running)` — advancing `last_seq` and renewing the lease — and rolls back with
`LeaseLostError` when that matched nothing, so a worker that lost its run writes nothing more. RunEvents are
inserted in bulk with host-assigned `seq` values; state updates and artifacts go to their own stores and
are never RunEvents (they are not delivered to clients). The final write also stores the outcome and
the assistant transcript item (at most one per run: a duplicate is ignored by the unique constraint).

Every write is one transaction (`_ledger_write`, on the loop's database executor); the run's end tells
the run-end observers inside it, so the rule of `runners.lifecycle.observers` holds here as everywhere.
See "the write" below for the one statement it is on PostgreSQL and the appends sent from the loop.
"""

from __future__ import annotations

import base64
import logging
import uuid
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from bindings.models import Workspace
from foundation import batches
from foundation.sql import LoopStatements, Statement
from langbot_sdk.protocol import ArtifactCreatedPayload
from runners.actions.platform_actions import platform_actions_from_results
from runners.lifecycle.observers import runs_ended
from runners.lifecycle.services import run_dispatch_on_commit, run_next_queued
from runners.models import Run, RunEvent
from runners.orchestrator.normalizer import Outcome
from runners.sql import Append, RunEnd, conversation_positions_take, ledger_append_many, ledger_write
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
    event_data: dict[str, Any] | None = None
    """The run event that announces it: an existing artifact's stored facts are written into it."""


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
        _artifact_announce(run, artifact)
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


def _artifact_announce(run: Run, artifact: ArtifactOutput) -> None:
    """A result naming an existing artifact (one the run uploaded, or one of its conversation): its event then
    carries the stored type, size and sha256, not the runner's word for them, and the chat and platform
    delivery show it like an inline one. An artifact the run may not read is not shown: the event loses its
    `artifact_id` and says why, so no run can show a user another conversation's or workspace's file."""
    from artifacts.selectors import artifact_for_run

    found = artifact_for_run(
        workspace_id=run.workspace_id,
        artifact_id=artifact.artifact_id or "",
        run_id=str(run.run_id),
        conversation_id=run.conversation_id,
    )
    data = artifact.event_data if artifact.event_data is not None else {}
    if found is None:
        logger.warning("run %s named artifact %s, which it may not read: not shown", run.run_id, artifact.artifact_id)
        data.pop("artifact_id", None)
        data["error"] = {"code": "not_found", "message": "no such artifact in this run's scope"}
        return
    data.update(mime_type=found.mime_type, size=found.size, sha256=found.sha256)
    logger.info("run %s announced its artifact %s (%s)", run.run_id, found.artifact_id, artifact.name)


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


# --- the write ---------------------------------------------------------------------------------------
#
# Every write of a run — each batch while it runs, and its end — goes through `_ledger_write`: one
# transaction on the loop's database executor that first updates the run row under the lease fence, then
# writes the batch, and at the end also tells the run-end observers (`runs_ended`) before it commits. So
# the rule of `runners.lifecycle.observers` holds for the worker's run end as for every other: the outbox
# rows commit with the run end, and whatever talks to the outside (waking the next run, an after-commit
# observer) happens only once it has committed.
#
# Inside the transaction, a batch of result events only — no state, artifacts or platform actions — is
# one statement on PostgreSQL (`runners.sql.ledger_write`: the fenced run update, the events, at the end
# the assistant transcript item and the lookup of the next queued run, as data-modifying CTEs); anything
# else, and every batch on SQLite, takes the same steps through the ORM (which cost about 2.5 times the
# statement's CPU at a run's end, so the statement stays where it can). One exception, which changes
# nothing of the above: a batch of events only while the run is running has no observers and nothing else
# to share its transaction with, so on PostgreSQL that same statement is sent straight from the loop
# (`ledger_append`), in autocommit, without a thread hand-off — the common write of a streaming run — or,
# when other runs of the loop write such a batch at the same moment, their group write (below).


def _events_only(batch: Batch) -> bool:
    """Result events and nothing else: no state, no artifacts, no platform actions."""
    return not batch.state and not batch.artifacts and all(type_ != "action.requested" for type_, _ in batch.events)


def _one_statement(batch: Batch) -> bool:
    return connection.vendor == "postgresql" and _events_only(batch)


@dataclass(frozen=True)
class _Written:
    events: list[RunEvent]
    following: str | None  # at the end: the run now first in its conversation's queue, if any


def _statement_rows_read(run: Run, *, last_seq: int, batch: Batch, now: datetime, rows: list[Any]) -> _Written:
    """What `ledger_write` answered; raises `LeaseLostError` when its fence matched nothing."""
    by_seq = dict(zip(range(last_seq + 1, last_seq + 1 + len(batch.events)), batch.events, strict=True))
    events: list[RunEvent] = []
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
            following = str(next_run_id)
    events.sort(key=lambda event: event.seq)
    return _Written(events, following)


def _write_statement(
    *,
    run: Run,
    lease_token: str,
    last_seq: int,
    batch: Batch,
    now: datetime,
    lease_expires_at: datetime | None,
    end: RunEnd | None,
    item: TranscriptItem | None,
) -> Statement:
    return ledger_write(
        run=run, lease_token=lease_token, first_seq=last_seq + 1, events=batch.events, now=now,
        lease_expires_at=lease_expires_at, end=end, reply=item,
    )  # fmt: skip


def _write_orm(
    *,
    run: Run,
    lease_token: str,
    last_seq: int,
    batch: Batch,
    now: datetime,
    lease_expires_at: datetime | None,
    end: RunEnd | None,
    item: TranscriptItem | None,
) -> _Written:
    """The steps of `ledger_write` through the ORM, with the batch's state, artifacts and platform actions
    after the fence and before the events (so the conversation's position lock is held only briefly)."""
    fenced = Run.objects.filter(pk=run.pk, lease_token=lease_token, status=Run.Status.RUNNING)
    if end is None:
        held = fenced.update(last_seq=last_seq + len(batch.events), lease_expires_at=lease_expires_at)
    else:
        held = fenced.update(
            status=end.status, status_reason=end.status_reason, error=end.error, usage=end.usage, output=end.output,
            last_seq=last_seq + len(batch.events), finished_at=now, lease_expires_at=None,
        )  # fmt: skip
    if not held:
        raise LeaseLostError()
    _side_effects(run, batch)
    events = _event_rows(run, last_seq + 1, batch.events)
    following = None
    if end is not None:
        if item is not None:
            TranscriptItem.objects.bulk_create([item], ignore_conflicts=True)
        queued = run_next_queued(run=run)
        following = str(queued.run_id) if queued is not None else None
    return _Written(events, following)


def _ledger_write(
    *,
    run: Run,
    lease_token: str,
    last_seq: int,
    batch: Batch,
    now: datetime,
    lease_expires_at: datetime | None = None,
    end: RunEnd | None = None,
    item: TranscriptItem | None = None,
) -> list[RunEvent]:
    """The one write of a run's results (and of its end, with `end`): one transaction, fenced by the
    lease; raises `LeaseLostError`, having written nothing, when the lease is gone."""
    with transaction.atomic():
        if _one_statement(batch):
            rows = _write_statement(
                run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, now=now,
                lease_expires_at=lease_expires_at, end=end, item=item,
            ).fetchall()  # fmt: skip
            written = _statement_rows_read(run, last_seq=last_seq, batch=batch, now=now, rows=rows)
        else:
            written = _write_orm(
                run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, now=now,
                lease_expires_at=lease_expires_at, end=end, item=item,
            )  # fmt: skip
        if end is not None:
            _ended(run, end=end, now=now)
            # In the ending transaction: an outbox observer's rows commit with the end, or not at all.
            runs_ended(runs=[run])
            if written.following is not None:
                run_dispatch_on_commit(run_id=written.following)
    return written.events


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
    if _events_only(batch):
        # Nothing else belongs in this write's transaction: on PostgreSQL the statement is it (see above).
        # It is shared with the other runs of this loop that write at the same moment (`_write_group`).
        appends = _appends.get(statements)
        if appends is None:
            appends = _appends[statements] = batches.Batches(_write_group)
        return await appends.submit(_Pending(statements, run, lease_token, last_seq, batch, lease_seconds))
    now = timezone.now()
    return await statements.executor(
        _ledger_write, run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, now=now,
        lease_expires_at=now + timedelta(seconds=lease_seconds),
    )  # fmt: skip


# --- group commit across runs -----------------------------------------------------------------------------
#
# A streaming run writes each delta before it is published, and waits for that write before its next one
# (merging what arrived meanwhile). With a statement per run, a hundred runs streaming at 50 deltas/s each
# asked the database for a statement per delta and run, and on two cores the runs' writes queued behind each
# other for a hundred milliseconds and more. So the appends of one loop are written together: what the runs
# hand in while a write is in flight goes in the next one, as one statement (`runners.sql.ledger_append_many`,
# each run still fenced by its own lease). On SQLite, which takes one writer at a time and syncs the file at
# every commit, they go in one transaction on the executor, each run's write in a savepoint of its own, so a
# run whose lease is gone rolls back only its own. Only batches of result events go in groups: a batch with
# state, artifacts or platform actions is written alone, as are all batches when the loop is quiet (a write
# then leaves at once, as the one-run write); nothing ever waits for a timer.


@dataclass
class _Pending:
    statements: LoopStatements
    run: Run
    lease_token: str
    last_seq: int
    batch: Batch
    lease_seconds: float


# What a run's append came to: its events, or why none was written.
_Outcome = tuple[list[RunEvent], BaseException | None]


async def _write_group(group: batches.Batch[_Pending, list[RunEvent]]) -> None:
    """The appends handed in together (all of one loop, so of one `LoopStatements`): one write for all of
    them, or, when there is one or the group write failed (then nothing of it was written), each alone."""
    pendings = [pending for pending, _ in group]
    statements = pendings[0].statements
    now = timezone.now()
    outcomes: list[_Outcome] | None = None
    if len(group) > 1:
        try:
            if statements.native:
                rows = await statements.fetchall(
                    ledger_append_many(
                        appends=[Append(p.run, p.lease_token, p.last_seq + 1, p.batch.events) for p in pendings],
                        now=now,
                        lease_expires_at=now + timedelta(seconds=max(p.lease_seconds for p in pendings)),
                    )
                )
                outcomes = _group_rows_read(pendings, now=now, rows=rows)
            else:
                outcomes = await statements.executor(_writes_orm, pendings, now)
        except Exception:
            # One run's failure must not fail the others': each is tried alone.
            logger.warning("a group write of %d runs failed; writing each alone", len(group), exc_info=True)
    if outcomes is None:
        outcomes = [await _write_one(pending, now) for pending in pendings]
    for (_, done), (events, error) in zip(group, outcomes, strict=True):
        batches.settle(done, events, error)


async def _write_one(pending: _Pending, now: datetime) -> _Outcome:
    statements = pending.statements
    lease_expires_at = now + timedelta(seconds=pending.lease_seconds)
    try:
        if statements.native:
            statement = _write_statement(
                run=pending.run, lease_token=pending.lease_token, last_seq=pending.last_seq, batch=pending.batch,
                now=now, lease_expires_at=lease_expires_at, end=None, item=None,
            )  # fmt: skip
            rows = await statements.fetchall(statement)
            written = _statement_rows_read(
                pending.run, last_seq=pending.last_seq, batch=pending.batch, now=now, rows=rows
            )
            return written.events, None
        events = await statements.executor(
            _ledger_write, run=pending.run, lease_token=pending.lease_token, last_seq=pending.last_seq,
            batch=pending.batch, now=now, lease_expires_at=lease_expires_at,
        )  # fmt: skip
        return events, None
    except Exception as exc:
        return [], exc


def _writes_orm(group: list[_Pending], now: datetime) -> list[_Outcome]:
    """The group's writes in one transaction, each in a savepoint of its own (`_ledger_write`'s atomic block
    nests): a run that lost its lease rolls back only its own. Any other error fails the whole group."""
    outcomes: list[_Outcome] = []
    with transaction.atomic():
        for pending in group:
            try:
                events = _ledger_write(
                    run=pending.run, lease_token=pending.lease_token, last_seq=pending.last_seq, batch=pending.batch,
                    now=now, lease_expires_at=now + timedelta(seconds=pending.lease_seconds),
                )  # fmt: skip
            except LeaseLostError as exc:
                outcomes.append(([], exc))
            else:
                outcomes.append((events, None))
    return outcomes


def _group_rows_read(group: list[_Pending], *, now: datetime, rows: list[Any]) -> list[_Outcome]:
    """Each run's part of a group write's rows, read as the one-run statement's; a run without a row lost
    its lease."""
    held: set[int] = set()
    by_run: dict[int, list[tuple[Any, ...]]] = {}
    for kind, a, run_pk, seq, position in rows:
        if kind == "run":
            held.add(a)
        else:
            by_run.setdefault(run_pk, []).append(("event", a, seq, None, position))
    outcomes: list[_Outcome] = []
    for pending in group:
        if pending.run.pk not in held:
            outcomes.append(([], LeaseLostError()))
            continue
        one = [("run", 1, None, None, None), *by_run.get(pending.run.pk, [])]
        written = _statement_rows_read(pending.run, last_seq=pending.last_seq, batch=pending.batch, now=now, rows=one)
        outcomes.append((written.events, None))
    return outcomes


# A loop's queue of appends, by its statements. The queue holds no reference to its key (its handler is a
# module function and the statements travel with each append), so an entry goes when its statements go.
_appends: weakref.WeakKeyDictionary[LoopStatements, batches.Batches[_Pending, list[RunEvent]]] = (
    weakref.WeakKeyDictionary()
)


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
    """Persist the last results and end the run with `outcome` — one transaction, fenced by the lease, in
    which the run-end observers run; the next queued run of the conversation is woken after it commits."""
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
    end = RunEnd(
        status=outcome.status, status_reason=outcome.status_reason, error=outcome.error, usage=outcome.usage,
        output=output,
    )  # fmt: skip
    return await statements.executor(
        _ledger_write, run=run, lease_token=lease_token, last_seq=last_seq, batch=batch, now=now, end=end, item=item
    )


def _ended(run: Run, *, end: RunEnd, now: datetime) -> None:
    run.status, run.status_reason, run.error = end.status, end.status_reason, end.error
    run.usage, run.output, run.finished_at = end.usage, end.output, now


def leases_renew(*, tokens: dict[int, str], lease_seconds: float) -> dict[int, tuple[bool, str]]:
    """Renew the leases this worker holds in one update; returns, for each run still held, whether a
    cancel was requested (and why). A run missing from the answer is lost."""
    now = timezone.now()
    held = Run.objects.filter(pk__in=list(tokens), lease_token__in=list(tokens.values()), status=Run.Status.RUNNING)
    with transaction.atomic():
        # Locked in pk order first, as a group write locks its runs (`runners.sql.ledger_append_many`): two
        # statements locking the same runs in different orders could each wait for the other until PostgreSQL
        # broke the deadlock a second later.
        list(held.select_for_update().order_by("pk").values_list("pk", flat=True))
        held.update(lease_expires_at=now + timedelta(seconds=lease_seconds))
    rows = held.values_list("pk", "lease_token", "cancel_requested_at", "cancel_reason")
    return {pk: (requested is not None, reason) for pk, token, requested, reason in rows if str(token) == tokens[pk]}
