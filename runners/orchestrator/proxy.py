"""Host handlers for the runtime → host proxy actions of runs this worker holds (DESIGN §5).

Every call goes through the same checks, in order: the run session is active here (else
`unauthorized`) → the caller plugin identity stamped by the runtime matches the runner's plugin →
the request parses (`invalid_argument` / `payload_too_large`) → the run's deadline has not passed →
the API and the resource are in the frozen snapshot (`unauthorized`) → the object is within the run's
scope (`not_found`). Every call is audited on the `runners.audit` logger.

Implemented: `state_get/set/delete/list` against `StateEntry`. Every other action answers `not_found`
after its checks until the providers behind it exist (models, tools, knowledge bases, history, events,
artifacts, storage, platform actions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from langbot_sdk.protocol import (
    PROXY_REQUEST_MODELS,
    Action,
    AgentAPIException,
    ErrorCode,
    StateGetResult,
    StateListResult,
)
from langbot_sdk.wire import CallInfo, Handler
from runners.orchestrator.db import DatabaseExecutor
from runners.orchestrator.session import RunSession
from runners.orchestrator.state import state_keys, state_read, state_remove, state_write

audit = logging.getLogger("runners.audit")

SessionLookup = Callable[[str], tuple[RunSession, float] | None]
"""run_id → (session, deadline as epoch seconds) of an active run held by this worker."""

STATE_ACTIONS = frozenset({Action.STATE_GET, Action.STATE_SET, Action.STATE_DELETE, Action.STATE_LIST})
_MODEL_OPERATIONS = {
    Action.INVOKE_LLM: "invoke",
    Action.INVOKE_LLM_STREAM: "stream",
    Action.INVOKE_RERANK: "rerank",
    Action.COUNT_TOKENS: None,
}


def _unauthorized(message: str) -> AgentAPIException:
    return AgentAPIException.unauthorized(message)


def _parse(action: Action, data: dict[str, Any]) -> Any:
    try:
        return PROXY_REQUEST_MODELS[action].model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        too_large = any("the limit is" in e["msg"] or "larger than the limit" in e["msg"] for e in errors)
        code = ErrorCode.PAYLOAD_TOO_LARGE if too_large else ErrorCode.INVALID_ARGUMENT
        raise AgentAPIException.of(
            code,
            f"invalid arguments for {action.value}",
            errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in errors],
        ) from None


def _resource_of(action: Action, request: Any) -> str:
    for name in ("model_id", "tool_name", "kb_id", "artifact_id", "area", "scope", "event_id", "action"):
        value = getattr(request, name, None)
        if value is not None:
            return f"{name}={value}"
    return ""


def _authorize(action: Action, request: Any, session: RunSession) -> None:
    """Raise unless the snapshot allows this call; object lookups come after (not implemented yet)."""
    res, apis = session.resources, session.available_apis
    if action in _MODEL_OPERATIONS:
        model = res.find_model(request.model_id)
        operation = _MODEL_OPERATIONS[action]
        if model is None or (operation and model.operations and operation not in model.operations):
            raise _unauthorized(f"model {request.model_id!r} is not authorized for this run")
    elif action in (Action.GET_TOOL_DETAIL, Action.CALL_TOOL):
        tool = res.find_tool(request.tool_name)
        operation = "detail" if action is Action.GET_TOOL_DETAIL else "call"
        if tool is None or (tool.operations and operation not in tool.operations):
            raise _unauthorized(f"tool {request.tool_name!r} is not authorized for this run")
    elif action is Action.RETRIEVE_KNOWLEDGE_BASE:
        kb = res.find_knowledge_base(request.kb_id)
        if kb is None or (kb.operations and "retrieve" not in kb.operations):
            raise _unauthorized(f"knowledge base {request.kb_id!r} is not authorized for this run")
    elif action in (Action.HISTORY_PAGE, Action.HISTORY_SEARCH, Action.EVENT_GET, Action.EVENT_PAGE):
        allowed = {
            Action.HISTORY_PAGE: apis.history_page,
            Action.HISTORY_SEARCH: apis.history_search,
            Action.EVENT_GET: apis.event_get,
            Action.EVENT_PAGE: apis.event_page,
        }[action]
        if not allowed:
            raise _unauthorized(f"{action.value} is not available to this run")
        conversation = getattr(request, "conversation_id", None)
        if conversation is not None and conversation != session.scope.conversation_id:
            raise AgentAPIException.not_found(f"no conversation {conversation!r} in this run's scope")
    elif action is Action.ARTIFACT_METADATA:
        if not apis.artifact_metadata:
            raise _unauthorized("artifact metadata is not available to this run")
    elif action in (Action.ARTIFACT_READ, Action.ARTIFACT_STREAM):
        if not apis.artifact_read:
            raise _unauthorized("artifact reads are not available to this run")
    elif action in (Action.STORAGE_GET, Action.STORAGE_SET, Action.STORAGE_DELETE, Action.STORAGE_LIST):
        if not apis.storage or request.area not in res.storage.areas:
            raise _unauthorized(f"storage area {request.area!r} is not authorized for this run")
    elif action is Action.PLATFORM_REQUEST_ACTION:
        actions = res.platform_capabilities.get("actions") or []
        if request.action not in actions:
            raise _unauthorized(f"platform action {request.action!r} is not authorized for this run")


async def _state(action: Action, request: Any, session: RunSession, db: DatabaseExecutor) -> dict[str, Any]:
    if not session.state_allows(request.scope):
        raise _unauthorized(f"state scope {request.scope!r} is not authorized for this run")
    scope_key = session.scope.state_key(request.scope)
    if scope_key is None:
        raise AgentAPIException.not_found(f"this run has no {request.scope} to keep state for")
    workspace_id = session.scope.workspace_id
    if action is Action.STATE_GET:
        found, value = await db(state_read, workspace_id=workspace_id, scope_key=scope_key, key=request.key)
        return StateGetResult(found=found, value=value).model_dump(mode="json")
    if action is Action.STATE_SET:
        await db(
            state_write,
            workspace_id=workspace_id,
            scope=request.scope,
            scope_key=scope_key,
            key=request.key,
            value=request.value,
            run_id=session.run_id,
        )
        return {"ok": True}
    if action is Action.STATE_DELETE:
        deleted = await db(state_remove, workspace_id=workspace_id, scope_key=scope_key, key=request.key)
        return {"deleted": deleted}
    keys, has_more = await db(
        state_keys, workspace_id=workspace_id, scope_key=scope_key, prefix=request.prefix, limit=request.limit
    )
    return StateListResult(keys=keys, has_more=has_more).model_dump(mode="json")


def proxy_handlers(*, sessions: SessionLookup, db: DatabaseExecutor) -> dict[str, Handler]:
    """One handler per runtime → host action, all bound to this worker's sessions."""

    def make(action: Action) -> Callable[[dict[str, Any], CallInfo], Awaitable[dict[str, Any]]]:
        async def handle(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
            run_id = str(data.get("run_id") or "")
            outcome = "error"
            resource = ""
            session: RunSession | None = None
            try:
                held = sessions(run_id)
                if held is None:
                    raise _unauthorized(f"run {run_id!r} is not active")
                session, deadline_at = held
                if data.get("caller_plugin_identity") != session.plugin_identity:
                    raise _unauthorized("the calling plugin does not provide this run's runner")
                request = _parse(action, data)
                resource = _resource_of(action, request)
                if time.time() > deadline_at:
                    raise AgentAPIException.deadline_exceeded("the run's deadline has passed")
                if action in STATE_ACTIONS:
                    result = await _state(action, request, session, db)
                else:
                    _authorize(action, request, session)
                    raise AgentAPIException.not_found(f"{action.value} has no provider on this host yet")
                outcome = "ok"
                return result
            except AgentAPIException as exc:
                outcome = exc.code
                raise
            finally:
                audit.info(
                    "run=%s runner=%s action=%s resource=%s scope=%s outcome=%s",
                    run_id,
                    session.scope.runner_id if session else "",
                    action.value,
                    resource,
                    session.scope.conversation_id if session else "",
                    outcome,
                )

        return handle

    return {action.value: make(action) for action in PROXY_REQUEST_MODELS}
