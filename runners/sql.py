"""The runners app's hand-written SQL, each statement built with its parameters (`Statement`).

These are the run's hot path: every run is loaded, claimed and ends through them, and a live subscription
starts with one. They are written by hand because compiling the ORM's query costs more than the round trip
on a small machine; the column lists come from the models (`ModelColumns`, `column`), so a renamed field
changes the statements with it. `tests/execution/sql_seams.txt` shows the text they render to.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps

from artifacts.models import WorkspaceArtifactSettings
from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from foundation.sql import (
    ModelColumns,
    Statement,
    column,
    insert_select_sql,
    insert_values,
    prep,
    sql_text_literals,
    table,
)
from runners.models import Budget, ConversationStream, Run, RunEvent
from transcripts.models import EventLog, TranscriptItem

# --- a live subscription's start ------------------------------------------------------------------------


def conversation_now(*, workspace_id: int, conversation_id: str) -> Statement:
    """Rows `(0, newest run event id of the conversation, NULL)`, `(1, pk, run_id)` per queued or
    running run, oldest first, and `(2, the conversation's last position, NULL)` (none before its first
    positioned event), all of one snapshot.

    Not prepared: like the ORM's queries it replaced, each execution is planned with its own values (a
    generic plan made on a young table could read every run event for a conversation that has none).
    """
    return Statement(
        _conversation_now_sql(),
        (workspace_id, conversation_id, workspace_id, conversation_id, workspace_id, conversation_id),
        prepare=False,
    )


@functools.cache
def _conversation_now_sql() -> str:
    r, e = table(Run), table(RunEvent)
    run_pk, run_ws, run_conv = column(Run, "id"), column(Run, "workspace"), column(Run, "conversation_id")
    event_pk, event_run = column(RunEvent, "id"), column(RunEvent, "run")
    return (
        f"SELECT 0, (SELECT e.{event_pk} FROM {e} e JOIN {r} x ON x.{run_pk} = e.{event_run}"
        f" WHERE x.{run_ws} = %s AND x.{run_conv} = %s ORDER BY e.{event_pk} DESC LIMIT 1), NULL"
        f" UNION ALL SELECT 1, r.{run_pk}, r.{column(Run, 'run_id')} FROM {r} r WHERE r.{run_ws} = %s"
        f" AND r.{run_conv} = %s AND r.{column(Run, 'status')} IN ({sql_text_literals(Run.ACTIVE_STATUSES)})"
        f" UNION ALL SELECT 2, s.{column(ConversationStream, 'last_position')}, NULL FROM {table(ConversationStream)} s"
        f" WHERE s.{column(ConversationStream, 'workspace_id')} = %s"
        f" AND s.{column(ConversationStream, 'conversation_id')} = %s"
        " ORDER BY 1, 2"
    )


# --- loading a run ---------------------------------------------------------------------------------------

RUN_LOAD_PARTS: tuple[ModelColumns[Any], ...] = (
    ModelColumns(Run, "r"),
    ModelColumns(EventLog, "e"),
    ModelColumns(Workspace, "w"),
    ModelColumns(AgentBinding, "b"),
    ModelColumns(Bot, "bt"),
    # The manifest is parsed once per digest (`descriptor_manifest`) and the other JSON columns are not
    # used by a run: decoding them per run cost more than the rest of the row.
    ModelColumns(
        RunnerDescriptor,
        "d",
        defer=("label", "description", "capabilities", "permissions", "context_policy", "config_schema", "manifest"),
    ),
)
"""The models a `run_load` row holds, in order, followed by the two transcript handles and the three
prefetched facts (`RUN_LOAD_FACTS`)."""

RUN_LOAD_FACTS = ("upload_max_bytes", "released_hold", "has_budget")
"""After the handles: the workspace's own runner upload limit (NULL: the host's default), whether the
conversation has a released hold (only then can the run owe a `human_takeover` fact), and whether the
workspace has an enabled budget (only then is the budget check worth its queries)."""


def run_load(*, run_id: uuid.UUID) -> Statement:
    """The run with everything its context needs, in one statement: event, workspace, binding, bot, runner
    descriptor and the two transcript handles (the current input item and the newest item before it; both
    indexed lookups with a LIMIT, whatever the conversation's length)."""
    return Statement(_run_load_sql(), (prep(Run, "run_id", run_id),))


@functools.cache
def _run_load_sql() -> str:
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
    # Three lookups every claim made one round trip each, folded in as indexed scalar subqueries. The hold
    # model is looked up by its label: runners.takeover imports runners.live, which imports this module.
    ConversationHold = apps.get_model("takeover", "ConversationHold")
    upload_max = (
        f"(SELECT s.{column(WorkspaceArtifactSettings, 'runner_upload_max_bytes')}"
        f" FROM {table(WorkspaceArtifactSettings)} s"
        f" WHERE s.{column(WorkspaceArtifactSettings, 'workspace')} = {r}.{column(Run, 'workspace')} LIMIT 1)"
    )
    released_hold = (
        f"EXISTS (SELECT 1 FROM {table(ConversationHold)} h"
        f" WHERE h.{column(ConversationHold, 'workspace')} = {r}.{column(Run, 'workspace')}"
        f" AND h.{column(ConversationHold, 'conversation_id')} = {r}.{column(Run, 'conversation_id')}"
        f" AND h.{column(ConversationHold, 'status')} = '{ConversationHold.Status.RELEASED.value}')"
    )
    has_budget = (
        f"EXISTS (SELECT 1 FROM {table(Budget)} bu"
        f" WHERE bu.{column(Budget, 'workspace')} = {r}.{column(Run, 'workspace')} AND bu.{column(Budget, 'enabled')})"
    )
    return (
        f"SELECT {', '.join(part.select for part in RUN_LOAD_PARTS)}, {current}, {latest},"
        f" {upload_max}, {released_hold}, {has_budget}"
        f" FROM {table(Run)} r"
        f" JOIN {table(EventLog)} e ON e.{column(EventLog, 'id')} = r.{column(Run, 'event')}"
        f" JOIN {table(Workspace)} w ON w.{column(Workspace, 'id')} = r.{column(Run, 'workspace')}"
        f" LEFT JOIN {table(AgentBinding)} b ON b.{column(AgentBinding, 'id')} = r.{column(Run, 'binding')}"
        f" LEFT JOIN {table(Bot)} bt ON bt.{column(Bot, 'id')} = r.{column(Run, 'bot')}"
        f" LEFT JOIN {table(RunnerDescriptor)} d"
        f" ON d.{column(RunnerDescriptor, 'runner_id')} = r.{column(Run, 'runner_id')}"
        f" WHERE r.{column(Run, 'run_id')} = %s"
    )


# --- claiming a run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """What a worker writes when it claims a queued run."""

    run: Run
    owner: str
    lease_token: uuid.UUID
    lease_expires_at: datetime
    started_at: datetime
    deadline_at: datetime
    authorization: dict[str, Any]
    # Under the `queue` policy an earlier active run of the same binding and conversation goes first.
    queue_policy: bool


def run_claim(claim: Claim) -> Statement:
    """Queued → running with this worker's lease, in one conditional update (no row changed: someone
    else has it, it is not queued, or it waits behind an earlier run)."""
    run = claim.run
    params: list[Any] = [
        Run.Status.RUNNING.value,
        claim.owner,
        prep(Run, "lease_token", claim.lease_token),
        prep(Run, "lease_expires_at", claim.lease_expires_at),
        prep(Run, "started_at", claim.started_at),
        prep(Run, "deadline_at", claim.deadline_at),
        prep(Run, "authorization", claim.authorization),
        run.pk,
        Run.Status.QUEUED.value,
    ]
    if claim.queue_policy:
        params += [run.workspace_id, run.conversation_id, run.binding_id, run.pk]
    return Statement(_run_claim_sql(queue_policy=claim.queue_policy), params)


def run_claim_with_state(claim: Claim, state: Statement) -> Statement:
    """The claim and the state snapshot of the run's context (`transcripts.sql.state_snapshot`) in one
    round trip: no row when the claim did not happen, else one row per state entry (or one row of NULLs
    when there is none). PostgreSQL only."""
    claimed = run_claim(claim)
    sql = (
        f"WITH claimed AS ({claimed.sql} RETURNING {column(Run, 'id')})"
        f" SELECT st.* FROM claimed LEFT JOIN LATERAL ({state.sql}) st ON TRUE"
    )
    return Statement(sql, (*claimed.params, *state.params))


@functools.cache
def _run_claim_sql(*, queue_policy: bool) -> str:
    c = functools.partial(column, Run)
    sql = (
        f"UPDATE {table(Run)} SET {c('status')} = %s, {c('lease_owner')} = %s, {c('lease_token')} = %s,"
        f" {c('lease_expires_at')} = %s, {c('attempts')} = {c('attempts')} + 1, {c('started_at')} = %s,"
        f" {c('deadline_at')} = %s, {c('authorization')} = %s"
        f" WHERE {c('id')} = %s AND {c('status')} = %s"
    )
    if queue_policy:
        # The statuses are literals so that `run_active_idx` answers it.
        sql += (
            f" AND NOT EXISTS (SELECT 1 FROM {table(Run)} o WHERE o.{c('workspace')} = %s"
            f" AND o.{c('conversation_id')} = %s AND o.{c('binding')} = %s"
            f" AND o.{c('status')} IN ({sql_text_literals(Run.ACTIVE_STATUSES)}) AND o.{c('id')} < %s)"
        )
    return sql


# --- writing a run's results -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEnd:
    """How a run ends, as `ledger_write` stores it."""

    status: str
    status_reason: str
    error: dict[str, Any] | None
    usage: dict[str, Any] | None
    output: str


def ledger_write(
    *,
    run: Run,
    lease_token: str,
    first_seq: int,
    events: list[tuple[str, dict[str, Any]]],
    now: datetime,
    lease_expires_at: datetime | None = None,
    end: RunEnd | None = None,
    reply: TranscriptItem | None = None,
) -> Statement:
    """A batch of results in one statement, fenced by the lease: the run update (the new `last_seq` and
    lease while running, or its end), the events, at the end the assistant transcript item and the lookup
    of the next queued run of the conversation — data-modifying CTEs, so one round trip and one implicit
    transaction do what the ORM does in six. The events of a run with a conversation take their positions
    from its `ConversationStream` row (`conversation_positions_take`, as a CTE the inserted rows join, so
    the row is locked before their ids are drawn). Rows: `('run', rows updated)`, `('event', id, seq,
    position)` per event and, at the end, `('next', run_id)` of a run waiting behind this one."""
    last_seq = first_seq + len(events) - 1
    positioned = bool(run.conversation_id) and bool(events)
    sets: list[Any]
    if end is None:
        sets = [last_seq, lease_expires_at]
    else:
        sets = [
            end.status, end.status_reason, prep(Run, "error", end.error), prep(Run, "usage", end.usage),
            end.output, last_seq, now,
        ]  # fmt: skip
    params: list[Any] = [
        *sets,
        run.pk,
        prep(Run, "lease_token", lease_token),
        Run.Status.RUNNING.value,
        *([run.workspace_id, run.conversation_id, len(events), len(events)] if positioned else []),
        now,
        *([first_seq - 1] if positioned else []),
        list(range(first_seq, last_seq + 1)),
        [type_ for type_, _ in events],
        [json.dumps(data, ensure_ascii=False, separators=(",", ":")) for _, data in events],
    ]
    if reply is not None:
        params += insert_values(reply)
    if end is not None:
        # `run_next_queued`: only runs of a conversation under a binding wait behind another.
        waits = bool(run.conversation_id) and run.binding_id is not None
        params += [run.workspace_id, run.conversation_id, run.binding_id if waits else -1]
    return Statement(_ledger_sql(final=end is not None, reply=reply is not None, positioned=positioned), params)


@dataclass(frozen=True)
class Append:
    """One running run's results for `ledger_append_many`: its events take seqs from `first_seq` on."""

    run: Run
    lease_token: str
    first_seq: int
    events: list[tuple[str, dict[str, Any]]]


def ledger_append_many(*, appends: list[Append], now: datetime, lease_expires_at: datetime) -> Statement:
    """The results of several running runs in one statement and one transaction (group commit across runs:
    `runners.orchestrator.ledger`), each run fenced by its own lease as in `ledger_write`: a run whose fence
    matched nothing has no row and none of its events is written, and the others are written all the same.
    The run rows are locked in pk order and the conversations' counters in (workspace, conversation) order,
    so two such writes never wait for each other crosswise. Positions: each conversation's counter is raised
    once by all of its runs' events, which take them run by run in pk order; the events are inserted in that
    order too, after every counter is locked, so within a conversation ids follow positions as with
    `ledger_write`. Rows: `('run', pk)` per run written, `('event', id, run pk, seq, position)` per event."""
    params: list[Any] = [
        [a.run.pk for a in appends],
        [prep(Run, "lease_token", a.lease_token) for a in appends],
        [a.first_seq + len(a.events) - 1 for a in appends],
        [a.run.workspace_id for a in appends],
        [a.run.conversation_id or None for a in appends],
        [len(a.events) for a in appends],
        Run.Status.RUNNING.value,
        lease_expires_at,
        now,
        [a.run.pk for a in appends for _ in a.events],
        [a.first_seq + i for a in appends for i in range(len(a.events))],
        [type_ for a in appends for type_, _ in a.events],
        [json.dumps(data, ensure_ascii=False, separators=(",", ":")) for a in appends for _, data in a.events],
        [i + 1 for a in appends for i in range(len(a.events))],
    ]
    return Statement(_ledger_append_many_sql(), params)


@functools.cache
def _ledger_append_many_sql() -> str:
    c = functools.partial(column, Run)
    e = functools.partial(column, RunEvent)
    s = functools.partial(column, ConversationStream)
    runs, streams = table(Run), table(ConversationStream)
    return (
        "WITH r AS (SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::integer[], %s::bigint[], %s::text[],"
        " %s::integer[]) AS r(pk, token, last_seq, ws, conv, n)),"
        f" locked AS MATERIALIZED (SELECT x.{c('id')} AS id FROM {runs} x JOIN r ON x.{c('id')} = r.pk"
        f" AND x.{c('lease_token')} = r.token AND x.{c('status')} = %s ORDER BY x.{c('id')} FOR UPDATE OF x),"
        f" upd AS (UPDATE {runs} SET {c('last_seq')} = r.last_seq, {c('lease_expires_at')} = %s FROM r"
        f" WHERE {runs}.{c('id')} = r.pk AND {runs}.{c('id')} IN (SELECT id FROM locked)"
        " RETURNING r.pk AS id, r.ws AS ws, r.conv AS conv, r.n AS n),"
        " agg AS (SELECT ws, conv, sum(n) AS n FROM upd WHERE conv IS NOT NULL GROUP BY ws, conv),"
        f" pos AS (INSERT INTO {streams} ({s('workspace_id')}, {s('conversation_id')}, {s('last_position')})"
        f" SELECT ws, conv, n FROM agg ORDER BY ws, conv ON CONFLICT ({s('workspace_id')}, {s('conversation_id')})"
        f" DO UPDATE SET {s('last_position')} = {streams}.{s('last_position')} + EXCLUDED.{s('last_position')}"
        f" RETURNING {s('workspace_id')} AS ws, {s('conversation_id')} AS conv, {s('last_position')} AS last),"
        " base AS (SELECT u.id, pos.last - agg.n + sum(u.n) OVER (PARTITION BY u.ws, u.conv ORDER BY u.id) - u.n"
        " AS base FROM upd u JOIN agg ON agg.ws = u.ws AND agg.conv = u.conv"
        " JOIN pos ON pos.ws = u.ws AND pos.conv = u.conv),"
        f" ev AS (INSERT INTO {table(RunEvent)}"
        f" ({e('run')}, {e('seq')}, {e('type')}, {e('data')}, {e('created_at')}, {e('position')})"
        " SELECT v.run, v.seq, v.type, v.data::jsonb, %s::timestamptz, base.base + v.k"
        " FROM unnest(%s::bigint[], %s::integer[], %s::text[], %s::text[], %s::integer[]) AS v(run, seq, type, data, k)"
        " JOIN upd ON upd.id = v.run LEFT JOIN base ON base.id = v.run ORDER BY v.run, v.seq"
        f" RETURNING {e('id')} AS id, {e('run')} AS run, {e('seq')} AS seq, {e('position')} AS position)"
        " SELECT 'run', id, NULL::bigint, NULL::integer, NULL::bigint FROM upd"
        " UNION ALL SELECT 'event', ev.id, ev.run, ev.seq, ev.position FROM ev"
    )


def _positions_sql(source: str) -> str:
    """Raise a conversation's counter by %s (workspace, conversation, count, count again), one row per row of
    `source`; returns `base`, the position before the first new one. The upsert locks the counter row until
    the transaction ends."""
    s = functools.partial(column, ConversationStream)
    t = table(ConversationStream)
    return (
        f"INSERT INTO {t} ({s('workspace_id')}, {s('conversation_id')}, {s('last_position')})"
        f" SELECT %s, %s, %s FROM {source} WHERE true ON CONFLICT ({s('workspace_id')}, {s('conversation_id')})"
        f" DO UPDATE SET {s('last_position')} = {t}.{s('last_position')} + EXCLUDED.{s('last_position')}"
        f" RETURNING {s('last_position')} - %s AS base"
    )


def conversation_positions_take(*, workspace_id: int, conversation_id: str, count: int) -> Statement:
    """Take `count` positions of a conversation's run events; one row `(base,)`: they are base+1..base+count.
    The counter row stays locked until the transaction ends, so call it before inserting the events."""
    return Statement(_positions_sql("(SELECT 1) AS one"), (workspace_id, conversation_id, count, count))


@functools.cache
def _ledger_sql(*, final: bool, reply: bool, positioned: bool = False) -> str:
    c = functools.partial(column, Run)
    e = functools.partial(column, RunEvent)
    # The events join `pos`, so the counter row is locked before their ids are drawn: ids and positions of a
    # conversation's events then follow its commit order.
    pos_cte = f" pos AS ({_positions_sql('upd')})," if positioned else ""
    pos_value, pos_from = (", v.seq + (pos.base - %s)", " pos,") if positioned else (", NULL", "")
    if final:
        sets = (
            f"{c('status')} = %s, {c('status_reason')} = %s, {c('error')} = %s, {c('usage')} = %s,"
            f" {c('output')} = %s, {c('last_seq')} = %s, {c('finished_at')} = %s, {c('lease_expires_at')} = NULL"
        )
    else:
        sets = f"{c('last_seq')} = %s, {c('lease_expires_at')} = %s"
    sql = (
        f"WITH upd AS (UPDATE {table(Run)} SET {sets}"
        f" WHERE {c('id')} = %s AND {c('lease_token')} = %s AND {c('status')} = %s RETURNING {c('id')} AS id),"
        f"{pos_cte}"
        f" ev AS (INSERT INTO {table(RunEvent)}"
        f" ({e('run')}, {e('seq')}, {e('type')}, {e('data')}, {e('created_at')}, {e('position')})"
        f" SELECT upd.id, v.seq, v.type, v.data::jsonb, %s::timestamptz{pos_value} FROM upd,{pos_from}"
        f" unnest(%s::integer[], %s::text[], %s::text[]) AS v(seq, type, data)"
        f" RETURNING {e('id')} AS id, {e('seq')} AS seq, {e('position')} AS position)"
    )
    if reply:
        sql += f", item AS ({insert_select_sql(TranscriptItem, 'upd')} ON CONFLICT DO NOTHING)"
    sql += (
        " SELECT 'run', (SELECT count(*) FROM upd), NULL::bigint, NULL::uuid, NULL::bigint"
        " UNION ALL SELECT 'event', ev.id, ev.seq, NULL, ev.position FROM ev"
    )
    if final:
        sql += (
            f" UNION ALL (SELECT 'next', NULL, NULL, q.{c('run_id')}, NULL FROM {table(Run)} q"
            f" WHERE q.{c('workspace')} = %s AND q.{c('conversation_id')} = %s AND q.{c('binding')} = %s"
            f" AND q.{c('status')} = {sql_text_literals([Run.Status.QUEUED])} AND EXISTS (SELECT 1 FROM upd)"
            f" ORDER BY q.{c('id')} LIMIT 1)"
        )
    return sql


# --- run creation ----------------------------------------------------------------------------------------


def conversation_lock(*, binding_pk: int, conversation_id: str) -> Statement:
    """Serialize run creation of one binding and conversation until the transaction ends. PostgreSQL only."""
    return Statement("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (binding_pk, conversation_id))
