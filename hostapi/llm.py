"""`invoke_llm` and `invoke_llm_stream` of a run: the extra arguments a runner may pass checked, the call
made through `resources.providers.chat` within what the run has left, its usage counted, and the answer
(or each chunk, as it arrives) in the protocol's shapes.

The caller has already checked the snapshot; here the model is read from the workspace (it may have been
deleted since the run started: `not_found`) and the run's budgets are checked (past them:
`quota_exceeded`). A stream is closed at the provider as soon as its consumer stops — a cancelled run or a
passed deadline closes this generator, which closes the provider's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from foundation.tracing import model_span_end, model_span_start, span_current
from hostapi.base import ProxyCall
from hostapi.model_calls import call_timeout, model_of_kind, usage_count
from langbot_sdk.protocol import AgentAPIException, InvokeLLMRequest
from resources.models import Model
from resources.providers.chat import ChatChunk, chat_complete, chat_stream

# Arguments a runner may pass through to the provider; anything else (a different `model`, `stream`,
# `n`, headers...) would change what the host bills, streams or authorizes.
ALLOWED_EXTRA_ARGS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "response_format",
        "tool_choice",
        "parallel_tool_calls",
    }
)


def allowed_options(request: InvokeLLMRequest) -> dict[str, Any]:
    options = dict(request.extra_args or {})
    refused = sorted(set(options) - ALLOWED_EXTRA_ARGS)
    if refused:
        raise AgentAPIException.invalid_argument(
            f"extra_args not allowed: {', '.join(refused)}", refused=refused, allowed=sorted(ALLOWED_EXTRA_ARGS)
        )
    return options


async def llm_invoke(call: ProxyCall) -> dict[str, Any]:
    request: InvokeLLMRequest = call.request
    model = await model_of_kind(call, Model.Kind.LLM)
    traced = _model_span(model)
    try:
        with span_current(traced):
            answer = await chat_complete(
                model=model,
                messages=request.messages,
                tools=request.tools,
                options=allowed_options(request),
                timeout=call_timeout(call, model.provider),
            )
    except BaseException as exc:
        model_span_end(traced, usage=None, error=exc)
        raise
    model_span_end(traced, usage=answer.usage)
    await usage_count(call, model, answer.usage)
    return {"message": answer.message, "usage": answer.usage, "finish_reason": answer.finish_reason}


async def llm_stream(call: ProxyCall) -> AsyncIterator[dict[str, Any]]:
    request: InvokeLLMRequest = call.request
    model = await model_of_kind(call, Model.Kind.LLM)
    traced = _model_span(model)
    # Awaited here, not in the generator, so a refusal (429, 401...) is the call's error, not a frame's.
    try:
        with span_current(traced):
            chunks = await chat_stream(
                model=model,
                messages=request.messages,
                tools=request.tools,
                options=allowed_options(request),
                timeout=call_timeout(call, model.provider),
            )
    except BaseException as exc:
        model_span_end(traced, usage=None, error=exc)
        raise
    return _frames(call, model, chunks, traced)


def _model_span(model: Model) -> Any:
    return model_span_start(
        operation="chat",
        model=model.name or model.model_id,
        model_id=model.model_id,
        provider_id=model.provider.provider_id,
    )


async def _frames(
    call: ProxyCall, model: Model, chunks: AsyncGenerator[ChatChunk, None], traced: Any = None
) -> AsyncIterator[dict[str, Any]]:
    last_usage: dict[str, Any] | None = None
    ended = False
    try:
        async for chunk in chunks:
            if chunk.usage is not None:
                last_usage = chunk.usage
            yield {"delta": chunk.delta, "usage": chunk.usage, "finish_reason": chunk.finish_reason}
        ended = True
    finally:
        # Counted here so a stream its consumer stopped (or that broke) still records what arrived.
        model_span_end(traced, usage=last_usage)
        try:
            await chunks.aclose()
        finally:
            await usage_count(call, model, last_usage, partial=not ended or last_usage is None)
