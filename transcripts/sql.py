"""The transcripts app's hand-written SQL, each statement built with its parameters (`Statement`).

Hot paths only: a runner paging through history call after call, and the state snapshot built for every
run's context (also read inside the worker's claim, `runners.sql.run_claim_with_state`).
"""

from __future__ import annotations

import functools
from typing import Any

from foundation.sql import Statement, column, table
from langbot_sdk.protocol import limits
from transcripts.models import EventLog, StateEntry, TranscriptItem

HISTORY_COLUMNS = (
    "id", "conversation_id", "thread_id", "role", "content", "contents", "artifacts", "event", "run_id",
    "runner_id", "actor", "created_at",
)  # fmt: skip
"""The columns of a history row, in order (`event` is the event's public id)."""


def history_rows(
    *,
    workspace_id: int,
    conversation_id: str,
    thread_id: str | None,
    before: int | None,
    after: int | None,
    forward: bool,
    limit: int,
) -> Statement:
    """Up to `limit` transcript items of one conversation (and thread), after/before a cursor, oldest or
    newest first; read in binary, so JSON arrives decoded and timestamps load fast."""
    optional = [value for value in (thread_id, before, after) if value is not None]
    sql = _history_sql(
        thread=thread_id is not None, before=before is not None, after=after is not None, forward=forward
    )
    return Statement(sql, (workspace_id, conversation_id, *optional, limit), binary=True)


@functools.cache
def _history_sql(*, thread: bool, before: bool, after: bool, forward: bool) -> str:
    c = functools.partial(column, TranscriptItem)
    selected = [f"e.{column(EventLog, 'event_id')}" if name == "event" else f"t.{c(name)}" for name in HISTORY_COLUMNS]
    conditions = [f"t.{c('workspace')} = %s", f"t.{c('conversation_id')} = %s"]
    conditions += [f"t.{c('thread_id')} = %s"] * thread
    conditions += [f"t.{c('id')} < %s"] * before + [f"t.{c('id')} > %s"] * after
    return (
        f"SELECT {', '.join(selected)} FROM {table(TranscriptItem)} t"
        f" LEFT JOIN {table(EventLog)} e ON e.{column(EventLog, 'id')} = t.{c('event')}"
        f" WHERE {' AND '.join(conditions)} ORDER BY t.{c('id')} {'ASC' if forward else 'DESC'} LIMIT %s"
    )


def state_snapshot(*, workspace_id: int, scope_keys: dict[str, str], alias: str = "s") -> Statement:
    """`(scope_key, key, value)` of the state of several scopes, ordered by scope key and key, at most 100
    keys per scope (`transcripts.state.state_snapshot_fold` folds them). PostgreSQL only."""
    params: tuple[Any, ...] = (
        workspace_id,
        list(scope_keys.values()),
        limits.STATE_LIST_MAX_KEYS * len(scope_keys),
    )
    return Statement(_state_snapshot_sql(alias), params)


@functools.cache
def _state_snapshot_sql(alias: str) -> str:
    c = functools.partial(column, StateEntry)
    return (
        f"SELECT {alias}.{c('scope_key')}, {alias}.{c('key')}, {alias}.{c('value')} FROM {table(StateEntry)} {alias}"
        f" WHERE {alias}.{c('workspace')} = %s AND {alias}.{c('scope_key')} = ANY(%s)"
        f" ORDER BY {alias}.{c('scope_key')}, {alias}.{c('key')} LIMIT %s"
    )
