"""Models, tools and knowledge bases (docs/host-apis.md): authorization against the frozen
snapshot here (`langbot_sdk.authorization`, shared with the SDK's fake host) — an id outside it answers
`unauthorized`. Then `invoke_llm` and `invoke_llm_stream` call the
model's provider (`llm`), `invoke_rerank` its `/rerank` endpoint (`rerank`), `count_tokens` counts on the
host with the model's tokenizer (`tokens`), tools go to their MCP server (`tools`), retrieval to the
knowledge base's index (`knowledge`). The deadline bound comes from the dispatcher.
"""

from __future__ import annotations

from hostapi.base import FamilyHandler, HandlerResult, ProxyCall
from hostapi.knowledge import knowledge_search
from hostapi.llm import llm_invoke, llm_stream
from hostapi.rerank import rerank_invoke
from hostapi.tokens import tokens_count
from hostapi.tools import tool_handle
from langbot_sdk.authorization import MODEL_ACTIONS, knowledge_authorize, model_authorize, tool_authorize
from langbot_sdk.protocol import Action


async def model_call(call: ProxyCall) -> HandlerResult:
    model_authorize(call.session, call.action, call.request.model_id)
    if call.action is Action.INVOKE_LLM:
        return await llm_invoke(call)
    if call.action is Action.INVOKE_LLM_STREAM:
        return await llm_stream(call)
    if call.action is Action.INVOKE_RERANK:
        return await rerank_invoke(call)
    return await tokens_count(call)


async def tool_call(call: ProxyCall) -> HandlerResult:
    tool_authorize(call.session, call.action, call.request.tool_name)
    return await tool_handle(call)


async def knowledge_retrieve(call: ProxyCall) -> HandlerResult:
    knowledge_authorize(call.session, call.request.kb_id)
    return await knowledge_search(call)


HANDLERS: dict[Action, FamilyHandler] = {
    **dict.fromkeys(MODEL_ACTIONS, model_call),
    Action.GET_TOOL_DETAIL: tool_call,
    Action.CALL_TOOL: tool_call,
    Action.RETRIEVE_KNOWLEDGE_BASE: knowledge_retrieve,
}
