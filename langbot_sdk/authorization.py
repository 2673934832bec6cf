"""The checks a proxy call goes through that need no database (docs/security.md, "Runner code"), in one place for both
hosts.

Why it ships in the SDK's wheel, not in the host: the fake host of `langbot_sdk.testing` must refuse exactly
what the host refuses (tests/sdk/test_fake_host_parity.py runs the same calls on both), and the SDK cannot
import the host; so the one copy of these rules lives here and the host's proxy handlers import it
(docs/testing.md). Runner authors never call it directly.

What belongs here: the run's scope and its isolated state keys (`RunScope`), request parsing with the
documented clamps, and each family's authorization against the run's frozen snapshot (API allowed →
resource in the snapshot → object within the run's scope). The host's proxy handlers
(`hostapi`) and the fake host of `langbot_sdk.testing` both call these functions, so a
runner refused by one is refused by the other, with the same error code. Nothing here reads a database:
the host passes its `RunSession`, the fake host a `RunGrant` built from the run's context.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from jsonschema import Draft202012Validator, validators
from jsonschema import exceptions as jsonschema_exceptions
from pydantic import ValidationError

from langbot_sdk.protocol import (
    PERSON_ID_KEY,
    PLATFORM_ACTION_OUTLIVE_KEY,
    PROXY_REQUEST_MODELS,
    Action,
    AgentAPIException,
    AgentResources,
    AgentRunContext,
    ContextAPICapabilities,
    ErrorCode,
    PlatformActionResult,
    PlatformActionStatus,
    ProxyRequest,
    StateScope,
    StorageArea,
    limits,
)

__all__ = [
    "CLAMPED",
    "MODEL_ACTIONS",
    "SCOPE_KEY_MAX_LENGTH",
    "ActionDecision",
    "Grant",
    "RunGrant",
    "RunScope",
    "api_require",
    "artifact_access",
    "cursor_value",
    "deadline_check",
    "knowledge_authorize",
    "model_authorize",
    "model_kind_check",
    "own_conversation",
    "own_thread",
    "page_cursors",
    "platform_action_decision",
    "platform_action_lookup_id",
    "platform_action_outlive_split",
    "platform_action_status_answer",
    "request_parse",
    "state_scope_key",
    "storage_owner_key",
    "tool_arguments_check",
    "tool_authorize",
]

logger = logging.getLogger("langbot_sdk.authorization")

SCOPE_KEY_MAX_LENGTH = 700


def _part(value: str) -> str:
    return value.replace("%", "%25").replace(":", "%3A")


def _bounded(key: str) -> str:
    if len(key) <= SCOPE_KEY_MAX_LENGTH:
        return key
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return f"{key[: SCOPE_KEY_MAX_LENGTH - 65]}#{digest}"


@dataclass(frozen=True)
class RunScope:
    """What one run may touch: workspace, bot, conversation, thread, binding, runner, actor, subject, person.

    State keys: `conversation:{runner}:{binding}:{conversation}[:{thread}]`, `actor:{runner}:{binding}:{actor}`,
    `subject:{runner}:{binding}:{subject}`, `person:{runner}:{binding}:{person}`, `runner:{runner}:{binding}` and
    `binding:{runner}:{binding}`.
    Each part is escaped (`%` and `:`), so a conversation id containing `:` cannot collide with a thread
    key; a key longer than the column keeps its readable head and ends in a digest of the whole.
    """

    workspace_id: int
    workspace: str
    runner_id: str
    binding_id: str
    bot_id: str = ""
    conversation_id: str = ""
    thread_id: str = ""
    actor_id: str = ""
    subject_id: str = ""
    # The host's person the actor is linked to (`actor.metadata.person_id` in the context), "" when none.
    person_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunScope:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def state_key(self, scope: StateScope | str) -> str | None:
        """The isolated key of `scope` for this run, or None when the run has no such subject (e.g. an
        event without an actor has no actor state)."""
        owner = f"{_part(self.runner_id)}:{_part(self.binding_id)}"
        match StateScope(scope):
            case StateScope.CONVERSATION:
                if not self.conversation_id:
                    return None
                key = f"conversation:{owner}:{_part(self.conversation_id)}"
                if self.thread_id:
                    key += f":{_part(self.thread_id)}"
            case StateScope.ACTOR:
                if not self.actor_id:
                    return None
                key = f"actor:{owner}:{_part(self.actor_id)}"
            case StateScope.SUBJECT:
                if not self.subject_id:
                    return None
                key = f"subject:{owner}:{_part(self.subject_id)}"
            case StateScope.PERSON:
                if not self.person_id:
                    return None
                key = f"person:{owner}:{_part(self.person_id)}"
            case StateScope.RUNNER:
                key = f"runner:{owner}"
            case StateScope.BINDING:
                key = f"binding:{owner}"
        return _bounded(key)


class Grant(Protocol):
    """What the checks read of a run's authorization snapshot; the host's `RunSession` is one."""

    run_id: str
    plugin_identity: str
    scope: RunScope
    resources: AgentResources
    available_apis: ContextAPICapabilities

    def state_allows(self, scope: StateScope | str) -> bool: ...


@dataclass
class RunGrant:
    """A run's authorization snapshot held in memory, as the fake host of `langbot_sdk.testing` keeps it."""

    run_id: str
    plugin_identity: str
    scope: RunScope
    resources: AgentResources
    available_apis: ContextAPICapabilities
    state_enabled: bool = False
    state_scopes: frozenset[str] = field(default_factory=frozenset)

    def state_allows(self, scope: StateScope | str) -> bool:
        return self.state_enabled and str(scope) in self.state_scopes

    @classmethod
    def of_context(
        cls, ctx: AgentRunContext, *, plugin_identity: str, runner_id: str, binding_id: str = "binding-1"
    ) -> RunGrant:
        """The snapshot the host froze for `ctx`: the host derives the context from the same snapshot, so
        the context's resources and available APIs are exactly what the host authorizes."""
        conversation = ctx.conversation
        scope = RunScope(
            workspace_id=1,
            workspace=(conversation.workspace_id if conversation and conversation.workspace_id else "default"),
            runner_id=runner_id,
            binding_id=binding_id,
            bot_id=(conversation.bot_id or "") if conversation else "",
            conversation_id=(conversation.conversation_id or "") if conversation else "",
            thread_id=(conversation.thread_id or "") if conversation else "",
            actor_id=_identity(ctx.actor.actor_type, ctx.actor.actor_id) if ctx.actor else "",
            subject_id=_identity(ctx.subject.subject_type, ctx.subject.subject_id) if ctx.subject else "",
            person_id=str(ctx.actor.metadata.get(PERSON_ID_KEY) or "") if ctx.actor else "",
        )
        return cls(
            run_id=ctx.run_id,
            plugin_identity=plugin_identity,
            scope=scope,
            resources=ctx.resources,
            available_apis=ctx.context.available_apis,
            state_enabled=ctx.resources.state.enabled,
            state_scopes=frozenset(str(s) for s in ctx.resources.state.scopes),
        )


def _identity(kind: str, identifier: str | None) -> str:
    return f"{kind}:{identifier}" if identifier else ""


# --- requests ---------------------------------------------------------------------------------------

CLAMPED: dict[Action, tuple[str, int]] = {
    Action.HISTORY_PAGE: ("limit", limits.HISTORY_PAGE_MAX),
    Action.EVENT_PAGE: ("limit", limits.EVENT_PAGE_MAX),
    Action.HISTORY_SEARCH: ("top_k", limits.HISTORY_SEARCH_TOP_K_MAX),
    Action.STATE_LIST: ("limit", limits.STATE_LIST_MAX_KEYS),
    Action.STORAGE_LIST: ("limit", limits.STORAGE_LIST_MAX_KEYS),
    Action.ARTIFACT_READ: ("length", limits.ARTIFACT_READ_MAX_BYTES),
    Action.ARTIFACT_STREAM: ("chunk_size", limits.ARTIFACT_READ_MAX_BYTES),
}
"""Counts above their cap are clamped, not refused (the SDK clamps them the same way before sending)."""


def _clamp(action: Action, data: dict[str, Any]) -> dict[str, Any]:
    rule = CLAMPED.get(action)
    if rule is None:
        return data
    name, cap = rule
    value = data.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and value > cap:
        return {**data, name: cap}
    return data


def request_parse(action: Action, data: dict[str, Any]) -> ProxyRequest:
    """The call's payload, clamped and parsed against its strict protocol model: `invalid_argument`, or
    `payload_too_large` for an over-cap value."""
    try:
        return PROXY_REQUEST_MODELS[action].model_validate(_clamp(action, data))
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        too_large = any("the limit is" in e["msg"] or "larger than the limit" in e["msg"] for e in errors)
        code = ErrorCode.PAYLOAD_TOO_LARGE if too_large else ErrorCode.INVALID_ARGUMENT
        raise AgentAPIException.of(
            code,
            f"invalid arguments for {action.value}",
            errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in errors],
        ) from None


def deadline_check(deadline_at: float | None, now: float) -> None:
    if deadline_at is not None and deadline_at - now <= 0:
        raise AgentAPIException.deadline_exceeded("the run's deadline has passed")


# --- shared by the families -------------------------------------------------------------------------


def api_require(allowed: bool, api: str) -> None:
    if not allowed:
        raise AgentAPIException.unauthorized(f"the {api} API is not available to this run", api=api)


def cursor_value(cursor: str | None, *, name: str) -> int | None:
    """A cursor is the decimal id of a row, passed as an opaque string."""
    if cursor is None or cursor == "":
        return None
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 19:
        raise AgentAPIException.invalid_argument(f"{name} is not a cursor this host issued", **{name: cursor})
    return int(cursor)


def page_cursors(cursors: list[str | None], *, has_more: bool, forward: bool) -> tuple[str | None, str | None]:
    """(next_cursor, prev_cursor) of a page whose item cursors are listed oldest first: `next` continues in
    the walking direction (None when nothing more exists there now), `prev` turns back."""
    if not cursors:
        return None, None
    newest, oldest = cursors[-1], cursors[0]
    next_cursor = (newest if forward else oldest) if has_more else None
    return next_cursor, oldest if forward else newest


def own_conversation(grant: Grant, requested: str | None) -> str:
    """The run's conversation. Naming another one answers `not_found`, as for any object outside the
    run's scope: v1 grants no cross-conversation reads."""
    own = grant.scope.conversation_id
    if not own:
        raise AgentAPIException.not_found("this run has no conversation")
    if requested is not None and requested != own:
        raise AgentAPIException.not_found(f"no conversation {requested!r} in this run's scope")
    return own


def own_thread(grant: Grant, requested: str | None) -> str | None:
    """The thread filter of a history read: a run inside a thread reads that thread only; a run outside
    threads may narrow to one thread of its conversation."""
    own = grant.scope.thread_id
    if own:
        if requested is not None and requested != own:
            raise AgentAPIException.not_found(f"no thread {requested!r} in this run's scope")
        return own
    return requested


# --- the families -----------------------------------------------------------------------------------

_MODEL_OPERATIONS: dict[Action, str | None] = {
    Action.INVOKE_LLM: "invoke",
    Action.INVOKE_LLM_STREAM: "stream",
    Action.INVOKE_RERANK: "rerank",
    Action.COUNT_TOKENS: None,
}
MODEL_ACTIONS = frozenset(_MODEL_OPERATIONS)


def model_authorize(grant: Grant, action: Action, model_id: str) -> None:
    model = grant.resources.find_model(model_id)
    operation = _MODEL_OPERATIONS[action]
    if model is None or (operation and model.operations and operation not in model.operations):
        raise AgentAPIException.unauthorized(f"model {model_id!r} is not authorized for this run", model_id=model_id)


def model_kind_check(model_id: str, kind: str, needed: str) -> None:
    """A model of one kind called for another (an LLM asked to rerank) is `invalid_argument`."""
    if kind != needed:
        raise AgentAPIException.invalid_argument(
            f"model {model_id!r} is a {kind} model; this call needs a model of kind {needed}",
            model_id=model_id,
            kind=kind,
        )


def tool_authorize(grant: Grant, action: Action, tool_name: str) -> None:
    tool = grant.resources.find_tool(tool_name)
    operation = "detail" if action is Action.GET_TOOL_DETAIL else "call"
    if tool is None or (tool.operations and operation not in tool.operations):
        raise AgentAPIException.unauthorized(f"tool {tool_name!r} is not authorized for this run", tool_name=tool_name)


def tool_arguments_check(tool_name: str, schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Arguments that do not match the tool's JSON schema are `invalid_argument`, naming where (`$.a`) and
    why; the tool is not called. A broken schema is the server's problem, not the runner's: no check."""
    validator_class = validators.validator_for(schema, default=Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except jsonschema_exceptions.SchemaError:
        logger.warning("tool %s has an invalid JSON schema; arguments are passed unchecked", tool_name)
        return
    error = jsonschema_exceptions.best_match(validator_class(schema).iter_errors(arguments))
    if error is not None:
        path = error.json_path
        raise AgentAPIException.invalid_argument(
            f"parameters of tool {tool_name!r} do not match its schema at {path}: {error.message}",
            tool_name=tool_name,
            path=path,
            reason=error.message,
        )


def knowledge_authorize(grant: Grant, kb_id: str) -> None:
    kb = grant.resources.find_knowledge_base(kb_id)
    if kb is None or (kb.operations and "retrieve" not in kb.operations):
        raise AgentAPIException.unauthorized(f"knowledge base {kb_id!r} is not authorized for this run", kb_id=kb_id)


def state_scope_key(grant: Grant, scope: StateScope | str) -> str:
    """The isolated key of a state scope: `unauthorized` when the binding's state policy does not enable
    it, `not_found` when the run has no subject for it (an event without an actor has no actor state)."""
    if not grant.state_allows(scope):
        raise AgentAPIException.unauthorized(f"state scope {scope!r} is not authorized for this run", scope=str(scope))
    key = grant.scope.state_key(scope)
    if key is None:
        raise AgentAPIException.not_found(f"this run has no {scope} to keep state for", scope=str(scope))
    return key


def storage_owner_key(grant: Grant, area: StorageArea | str) -> str:
    """The owner key of a storage area, once the API and the area are authorized: `plugin:{author/name}`
    (the plugin's own, whichever binding runs it), `binding:{runner}:{binding}`, or `workspace`."""
    api_require(grant.available_apis.storage, "storage")
    if area not in grant.resources.storage.areas:
        raise AgentAPIException.unauthorized(f"storage area {area!r} is not authorized for this run", area=str(area))
    match StorageArea(area):
        case StorageArea.PLUGIN:
            return f"plugin:{grant.plugin_identity}"
        case StorageArea.BINDING:
            return f"binding:{grant.scope.runner_id}:{grant.scope.binding_id}"
        case StorageArea.WORKSPACE:
            return "workspace"


def artifact_access(grant: Grant, artifact_id: str, *, operation: str) -> list[str]:
    """The artifact ids the snapshot grants for `operation`; `unauthorized` when neither the API nor a
    grant of this artifact allows it. The caller then looks the artifact up among the run's own, its
    conversation's and these (`not_found` otherwise)."""
    apis = grant.available_apis
    api_allowed = apis.artifact_metadata if operation == "metadata" else apis.artifact_read
    granted = [a.artifact_id for a in grant.resources.artifacts if not a.operations or operation in a.operations]
    if not api_allowed and artifact_id not in granted:
        raise AgentAPIException.unauthorized(
            f"artifact {operation} is not available to this run", artifact_id=artifact_id
        )
    return granted


@dataclass(frozen=True)
class ActionDecision:
    allowed: bool
    needs_approval: bool


def platform_action_decision(*, capabilities: dict[str, Any], action: str) -> ActionDecision:
    """An action the manifest does not ask for or the binding's policy does not list is refused; an allowed
    one waits for an operator's approval unless the binding turned `require_action_approval` off."""
    actions = capabilities.get("actions")
    allowed = isinstance(actions, list) and action in actions
    return ActionDecision(allowed=allowed, needs_approval=bool(capabilities.get("require_action_approval", True)))


def platform_action_outlive_split(payload: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The payload to deliver and whether the request may outlive its run (the host's own key, removed so
    no platform ever sees it)."""
    delivered = {k: v for k, v in payload.items() if k != PLATFORM_ACTION_OUTLIVE_KEY}
    return delivered, payload.get(PLATFORM_ACTION_OUTLIVE_KEY) is True


def platform_action_lookup_id(target: dict[str, Any]) -> int:
    """The request id an `action.get` names (`target.request_id`, an integer or its digits)."""
    value = target.get("request_id")
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise AgentAPIException.invalid_argument(
            "action.get needs target.request_id: the request_id an earlier request answered with"
        )
    return value


def platform_action_status_answer(status: PlatformActionStatus) -> dict[str, Any]:
    """The answer to `action.get`: the lookup itself is accepted; `result` is the request's status."""
    return PlatformActionResult(accepted=True, result=status.model_dump(mode="json")).model_dump(mode="json")
