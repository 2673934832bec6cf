"""The host-owned state store behind `api.state` and `state.updated` results (docs/state-storage-artifacts.md, "State").

Values are JSON only and at most 256 KiB as compact JSON; a list returns at most 100 keys. The scope
key (see `scope.py`) isolates every runner+binding, so two bindings never see each other's keys. Both
the proxy handlers and the result normalizer write through `state_write`, so the same checks apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from django.db import connection

from langbot_sdk.protocol import StateScope, limits, state_value_checked
from transcripts.models import StateEntry
from transcripts.selectors import keys_page
from transcripts.sql import state_snapshot as state_snapshot_statement


def state_read(*, workspace_id: int, scope_key: str, key: str) -> tuple[bool, Any]:
    row = StateEntry.objects.filter(workspace_id=workspace_id, scope_key=scope_key, key=key).values_list(
        "value", flat=True
    )
    values = list(row[:1])
    return (True, values[0]) if values else (False, None)


def state_write(
    *, workspace_id: int, scope: StateScope | str, scope_key: str, key: str, value: Any, run_id: str | None
) -> None:
    """Insert or replace one value (a single upsert: concurrent writers never collide)."""
    size = state_value_checked(value)
    StateEntry.objects.bulk_create(
        [
            StateEntry(
                workspace_id=workspace_id,
                scope=str(scope),
                scope_key=scope_key,
                key=key,
                value=value,
                size_bytes=size,
                updated_by_run=run_id,
            )
        ],
        update_conflicts=True,
        unique_fields=["workspace", "scope_key", "key"],
        update_fields=["value", "size_bytes", "updated_by_run", "updated_at", "scope"],
    )


def state_remove(*, workspace_id: int, scope_key: str, key: str) -> bool:
    deleted, _ = StateEntry.objects.filter(workspace_id=workspace_id, scope_key=scope_key, key=key).delete()
    return deleted > 0


def state_keys(*, workspace_id: int, scope_key: str, prefix: str | None, limit: int) -> tuple[list[str], bool]:
    rows = StateEntry.objects.filter(workspace_id=workspace_id, scope_key=scope_key)
    return keys_page(rows, prefix=prefix, limit=limit, cap=limits.STATE_LIST_MAX_KEYS)


def state_snapshot_fold(
    rows: Iterable[Sequence[Any]], scope_keys: dict[str, str], *, decoded: bool = False
) -> dict[str, dict[str, Any]]:
    """The snapshot of (scope_key, key, value) rows ordered by scope key and key, at most 100 keys per
    scope; values are raw column values unless `decoded` (rows from the ORM). Rows whose scope key is NULL
    (an outer join that found no state) are skipped."""
    snapshot: dict[str, dict[str, Any]] = {scope: {} for scope in scope_keys}
    by_key = {scope_key: scope for scope, scope_key in scope_keys.items()}
    value_field = cast(Any, StateEntry._meta.get_field("value"))
    cap = limits.STATE_LIST_MAX_KEYS
    for scope_key, key, value in rows:
        if scope_key is None:
            continue
        values = snapshot[by_key[scope_key]]
        if len(values) < cap:
            values[key] = value if decoded else value_field.from_db_value(value, None, connection)
    return snapshot


def state_snapshot(*, workspace_id: int, scope_keys: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The state of several scopes for a run context: one indexed query, at most 100 keys per scope.
    Built for every run, so on PostgreSQL it is one prepared statement rather than an ORM query."""
    if not scope_keys:
        return {}
    if connection.vendor == "postgresql":
        rows = state_snapshot_statement(workspace_id=workspace_id, scope_keys=scope_keys).fetchall()
        return state_snapshot_fold(rows, scope_keys)
    queryset = (
        StateEntry.objects.filter(workspace_id=workspace_id, scope_key__in=list(scope_keys.values()))
        .order_by("scope_key", "key")
        .values_list("scope_key", "key", "value")[: limits.STATE_LIST_MAX_KEYS * len(scope_keys)]
    )
    return state_snapshot_fold(queryset, scope_keys, decoded=True)
