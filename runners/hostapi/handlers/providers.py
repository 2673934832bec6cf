"""Models, tools and knowledge bases (PROTOCOL_V1 §7.1–§7.3): authorization against the frozen
snapshot here — an id outside it answers `unauthorized`. Then `invoke_llm` and `invoke_llm_stream` call the
model's provider (`llm`), `invoke_rerank` its `/rerank` endpoint (`rerank`), `count_tokens` counts on the
host with the model's tokenizer (`tokens`), tools go to their MCP server (`tools`), retrieval to the
knowledge base's index (`knowledge`). The deadline bound comes from the dispatcher.
"""

from __future__ import annotations

from langbot_sdk.protocol import Action
from runners.hostapi.handlers.base import FamilyHandler, HandlerResult, ProxyCall, unauthorized
from runners.hostapi.handlers.knowledge import knowledge_search
from runners.hostapi.handlers.llm import llm_invoke, llm_stream
from runners.hostapi.handlers.rerank import rerank_invoke
from runners.hostapi.handlers.tokens import tokens_count
from runners.hostapi.handlers.tools import tool_handle

_MODEL_OPERATIONS: dict[Action, str | None] = {
    Action.INVOKE_LLM: "invoke",
    Action.INVOKE_LLM_STREAM: "stream",
    Action.INVOKE_RERANK: "rerank",
    Action.COUNT_TOKENS: None,
}


async def model_call(call: ProxyCall) -> HandlerResult:
    model_id = call.request.model_id
    model = call.session.resources.find_model(model_id)
    operation = _MODEL_OPERATIONS[call.action]
    if model is None or (operation and model.operations and operation not in model.operations):
        raise unauthorized(f"model {model_id!r} is not authorized for this run", model_id=model_id)
    if call.action is Action.INVOKE_LLM:
        return await llm_invoke(call)
    if call.action is Action.INVOKE_LLM_STREAM:
        return await llm_stream(call)
    if call.action is Action.INVOKE_RERANK:
        return await rerank_invoke(call)
    return await tokens_count(call)


async def tool_call(call: ProxyCall) -> HandlerResult:
    tool_name = call.request.tool_name
    tool = call.session.resources.find_tool(tool_name)
    operation = "detail" if call.action is Action.GET_TOOL_DETAIL else "call"
    if tool is None or (tool.operations and operation not in tool.operations):
        raise unauthorized(f"tool {tool_name!r} is not authorized for this run", tool_name=tool_name)
    return await tool_handle(call)


async def knowledge_retrieve(call: ProxyCall) -> HandlerResult:
    kb_id = call.request.kb_id
    kb = call.session.resources.find_knowledge_base(kb_id)
    if kb is None or (kb.operations and "retrieve" not in kb.operations):
        raise unauthorized(f"knowledge base {kb_id!r} is not authorized for this run", kb_id=kb_id)
    return await knowledge_search(call)


HANDLERS: dict[Action, FamilyHandler] = {
    **dict.fromkeys(_MODEL_OPERATIONS, model_call),
    Action.GET_TOOL_DETAIL: tool_call,
    Action.CALL_TOOL: tool_call,
    Action.RETRIEVE_KNOWLEDGE_BASE: knowledge_retrieve,
}
