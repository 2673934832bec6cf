"""`state_get/set/delete/list` (docs/state-storage-artifacts.md): small JSON values per conversation, actor, subject,
runner or binding scope, isolated per runner and binding by the scope key (`runners.access.scope`).

The scope must be enabled by the binding's state policy (`unauthorized`); a scope the run has no
subject for — an event without an actor has no actor state — answers `not_found`. Values are JSON
only and ≤ 256 KiB (`invalid_argument` / `payload_too_large`, the same `state_write` checks the
`state.updated` results of the normalizer go through); a list returns at most 100 keys.

A set is an upsert of the value and a delete removes the key: made again (the SDK never re-sends a call,
but a runner may repeat one whose answer it lost), either leaves the same row, so no idempotency key is
needed.
"""

from __future__ import annotations

from hostapi.base import FamilyHandler, HandlerResult, ProxyCall
from langbot_sdk.authorization import state_scope_key
from langbot_sdk.protocol import (
    Action,
    StateDeleteResult,
    StateGetResult,
    StateListResult,
    StateSetResult,
)
from transcripts.state import state_keys, state_read, state_remove, state_write


def _scope_key(call: ProxyCall) -> str:
    return state_scope_key(call.session, call.request.scope)


async def state_get(call: ProxyCall) -> HandlerResult:
    scope_key = _scope_key(call)
    found, value = await call.db(
        state_read, workspace_id=call.session.scope.workspace_id, scope_key=scope_key, key=call.request.key
    )
    return StateGetResult(found=found, value=value).model_dump(mode="json")


async def state_set(call: ProxyCall) -> HandlerResult:
    scope_key = _scope_key(call)
    request = call.request
    await call.db(
        state_write,
        workspace_id=call.session.scope.workspace_id,
        scope=request.scope,
        scope_key=scope_key,
        key=request.key,
        value=request.value,
        run_id=call.session.run_id,
    )
    return StateSetResult().model_dump(mode="json")


async def state_delete(call: ProxyCall) -> HandlerResult:
    scope_key = _scope_key(call)
    deleted = await call.db(
        state_remove, workspace_id=call.session.scope.workspace_id, scope_key=scope_key, key=call.request.key
    )
    return StateDeleteResult(deleted=deleted).model_dump(mode="json")


async def state_list(call: ProxyCall) -> HandlerResult:
    scope_key = _scope_key(call)
    keys, has_more = await call.db(
        state_keys,
        workspace_id=call.session.scope.workspace_id,
        scope_key=scope_key,
        prefix=call.request.prefix,
        limit=call.request.limit,
    )
    return StateListResult(keys=keys, has_more=has_more).model_dump(mode="json")


HANDLERS: dict[Action, FamilyHandler] = {
    Action.STATE_GET: state_get,
    Action.STATE_SET: state_set,
    Action.STATE_DELETE: state_delete,
    Action.STATE_LIST: state_list,
}
