"""The resource builder: what one run may use (docs/context-and-results.md, "The resource snapshot"), as
`AgentResources` plus the context APIs it opens.

The rule, per kind of resource (model, knowledge base, tool): the manifest must ask for that kind of
access, and the binding's resource policy must allow the resource. Then
- where the runner's config selects something of the kind (a model selector, a knowledge-base selector
  with a value), the selection narrows it: only what is selected *and* allowed is in the snapshot;
- where it selects nothing — no selector for the kind (tools always: there is no tool selector), or a
  selector left unset or empty — the snapshot is everything the policy allows (`*`: every one of the
  workspace). So a runner with no model field can use the models the binding allows, and a knowledge
  base allowed in the binding reaches a runner whose knowledge-base field was left empty.
Each must also exist in the run's workspace: the `*_read` callables are handed the allowed ids (called
only when there are any, so a runner selecting nothing costs no query; `None` means every one of the
workspace) and return their rows, whose kind, abilities, descriptions and schemas are what the runner sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bindings.policies import WILDCARD, ResourcePolicy, StatePolicy
from langbot_sdk.protocol import (
    AgentResources,
    AgentRunnerContextPolicy,
    AgentRunnerPermissions,
    ContextAPICapabilities,
    DynamicFormItemSchema,
    DynamicFormItemType,
    HistoryResource,
    KnowledgeBaseResource,
    ModelResource,
    StateResource,
    StorageResource,
    ToolResource,
)
from resources.models import KnowledgeBase, MCPTool, Model


def _selected_ids(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str) and item.strip()]
    return []


def config_selections(
    schema: Iterable[DynamicFormItemSchema], config: dict[str, Any]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The (model id, model kind) pairs and knowledge base ids the runner config selects, in order."""
    models: list[tuple[str, str]] = []
    kbs: list[str] = []
    for item in schema:
        value = config.get(item.name, item.default)
        if item.type is DynamicFormItemType.MODEL_SELECTOR:
            models += [(model_id, item.model_kind or "llm") for model_id in _selected_ids(value)]
        elif item.type is DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR:
            kbs += _selected_ids(value)
    return list(dict.fromkeys(models)), list(dict.fromkeys(kbs))


def _model_resource(row: Model, *, operations: list[Any]) -> ModelResource:
    return ModelResource(
        model_id=row.model_id,
        name=row.name,
        kind=row.kind,
        operations=operations,
        supports_tools=row.supports_tools,
        supports_vision=row.supports_vision,
        context_window=row.context_window,
        metadata={"max_output_tokens": row.max_output_tokens} if row.max_output_tokens else {},
    )


def _tool_resource(row: MCPTool, *, operations: list[Any]) -> ToolResource:
    return ToolResource(
        tool_name=row.tool_name,
        description=row.description or None,
        parameters=row.parameters or {},
        source=f"mcp:{row.server.server_id}",
        operations=operations,
    )


def resources_build(
    *,
    permissions: AgentRunnerPermissions,
    context_policy: AgentRunnerContextPolicy,
    schema: list[DynamicFormItemSchema],
    config: dict[str, Any],
    resource_policy: ResourcePolicy,
    state_policy: StatePolicy,
    models_read: Callable[[list[str] | None], Mapping[str, Model]],
    tools_read: Callable[[list[str] | None], Mapping[str, MCPTool]],
    knowledge_bases_read: Callable[[list[str] | None], Mapping[str, KnowledgeBase]],
) -> tuple[AgentResources, ContextAPICapabilities]:
    selected_models, selected_kbs = config_selections(schema, config)

    models: list[ModelResource] = []
    if selected_models:
        allowed = list(dict.fromkeys(m for m, _ in selected_models if resource_policy.allows_model(m)))
    else:
        allowed = list(dict.fromkeys(resource_policy.allowed_model_ids))
    if permissions.models and allowed:
        model_rows = models_read(None if WILDCARD in allowed else allowed)
        for model_id in model_rows if WILDCARD in allowed else allowed:
            row = model_rows.get(model_id)
            if row is not None:
                models.append(_model_resource(row, operations=list(permissions.models)))

    tools: list[ToolResource] = []
    names = list(dict.fromkeys(resource_policy.allowed_tool_names))
    if permissions.tools and names:
        tool_rows = tools_read(None if WILDCARD in names else names)
        for name in tool_rows if WILDCARD in names else names:
            tool = tool_rows.get(name)
            if tool is not None:
                tools.append(_tool_resource(tool, operations=list(permissions.tools)))

    kbs: list[KnowledgeBaseResource] = []
    if selected_kbs:
        allowed_kbs = [kb_id for kb_id in selected_kbs if resource_policy.allows_kb(kb_id)]
    else:
        allowed_kbs = list(dict.fromkeys(resource_policy.allowed_kb_ids))
    if permissions.knowledge_bases and allowed_kbs:
        kb_rows = knowledge_bases_read(None if WILDCARD in allowed_kbs else allowed_kbs)
        for kb_id in kb_rows if WILDCARD in allowed_kbs else allowed_kbs:
            kb = kb_rows.get(kb_id)
            if kb is not None:
                kbs.append(
                    KnowledgeBaseResource(
                        kb_id=kb.kb_id,
                        name=kb.name,
                        description=kb.description or None,
                        operations=list(permissions.knowledge_bases),
                    )
                )

    areas = [area for area in resource_policy.storage_areas if area.value in permissions.storage]
    state = StateResource(
        enabled=state_policy.enable_state and bool(state_policy.state_scopes),
        scopes=list(state_policy.state_scopes) if state_policy.enable_state else [],
    )
    history = HistoryResource(
        page="page" in permissions.history and context_policy.supports_history_pull,
        search="search" in permissions.history and context_policy.supports_history_search,
        event_get="get" in permissions.events,
        event_page="page" in permissions.events,
        # The binding's grant (`ResourcePolicy.history_conversations` / `history_same_actor`): which other
        # conversations is the run session's `history_grant`, checked by the host on every read.
        cross_conversation=resource_policy.grants_cross_conversation
        and (
            ("page" in permissions.history and context_policy.supports_history_pull)
            or ("search" in permissions.history and context_policy.supports_history_search)
        ),
    )
    platform_actions = [a for a in permissions.platform_api if resource_policy.allows_platform_action(a)]
    platform: dict[str, Any] = {}
    if platform_actions:
        platform = {"actions": platform_actions, "require_action_approval": resource_policy.require_action_approval}

    resources = AgentResources(
        models=models,
        tools=tools,
        knowledge_bases=kbs,
        storage=StorageResource(areas=areas),
        state=state,
        history=history,
        platform_capabilities=platform,
    )
    artifact_pull = context_policy.supports_artifact_pull
    apis = ContextAPICapabilities(
        history_page=history.page,
        history_search=history.search,
        event_get=history.event_get,
        event_page=history.event_page,
        artifact_metadata="metadata" in permissions.artifacts and artifact_pull,
        artifact_read="read" in permissions.artifacts and artifact_pull,
        state=state.enabled,
        storage=bool(areas),
    )
    return resources, apis
