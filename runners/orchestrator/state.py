"""The host-owned state store behind `api.state` and `state.updated` results (DESIGN §5).

Values are JSON only and at most 256 KiB as compact JSON; a list returns at most 100 keys. The scope
key (see `scope.py`) isolates every runner+binding, so two bindings never see each other's keys. Both
the proxy handlers and the result normalizer write through `state_write`, so the same checks apply.
"""

from __future__ import annotations

from typing import Any

from langbot_sdk.protocol import AgentAPIException, StateScope, limits, state_value_size
from transcripts.models import StateEntry


def state_value_checked(value: Any) -> int:
    """The JSON size of `value`; raises `AgentAPIException` (invalid_argument / payload_too_large)."""
    try:
        size = state_value_size(value)
    except ValueError as exc:
        raise AgentAPIException.invalid_argument(str(exc)) from None
    if size > limits.STATE_VALUE_MAX_BYTES:
        raise AgentAPIException.payload_too_large(
            f"state value is {size} bytes as JSON; the limit is {limits.STATE_VALUE_MAX_BYTES}",
            size=size,
            max_bytes=limits.STATE_VALUE_MAX_BYTES,
        )
    return size


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
    limit = max(1, min(limit, limits.STATE_LIST_MAX_KEYS))
    rows = StateEntry.objects.filter(workspace_id=workspace_id, scope_key=scope_key)
    if prefix:
        rows = rows.filter(key__startswith=prefix)
    keys = list(rows.order_by("key").values_list("key", flat=True)[: limit + 1])
    return keys[:limit], len(keys) > limit


def state_snapshot(*, workspace_id: int, scope_keys: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The state of several scopes for a run context: one indexed query, at most 100 keys per scope."""
    snapshot: dict[str, dict[str, Any]] = {scope: {} for scope in scope_keys}
    if not scope_keys:
        return snapshot
    by_key = {scope_key: scope for scope, scope_key in scope_keys.items()}
    cap = limits.STATE_LIST_MAX_KEYS
    rows = (
        StateEntry.objects.filter(workspace_id=workspace_id, scope_key__in=list(by_key))
        .order_by("scope_key", "key")
        .values_list("scope_key", "key", "value")[: cap * len(by_key)]
    )
    for scope_key, key, value in rows:
        values = snapshot[by_key[scope_key]]
        if len(values) < cap:
            values[key] = value
    return snapshot
