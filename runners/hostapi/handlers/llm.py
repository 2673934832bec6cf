"""`invoke_llm` and `invoke_llm_stream` against the model's OpenAI-compatible provider: the run's messages
and tools turned into a chat completion request, the answer (or each streamed chunk, as it arrives) turned
back into protocol shapes, and provider failures into typed `AgentAPIException`s whose messages never carry
the provider's key.

The caller has already checked the snapshot; here the model is read from the workspace (it may have been
deleted since the run started: `not_found`). A stream is closed at the provider as soon as its consumer
stops — a cancelled run or a passed deadline closes the generator, whose `finally` closes the HTTP stream.

Calls reuse one client per provider and event loop (`provider_client`): building an `AsyncOpenAI` loads the
CA bundle into a new SSL context, about 20 ms on the 2-core development machine, which every call paid
before (bench/model_proxy.py); a kept client also keeps its connections to the provider alive between calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai

from foundation.outbound import AddressRefusedError
from langbot_sdk.external import sse_events
from langbot_sdk.protocol import AgentAPIException, ContentElement, InvokeLLMRequest, Message
from resources.clients import async_openai_client, provider_private_allowed, redacted, status_message
from resources.models import Model, ModelProvider
from runners.hostapi.handlers.base import ProxyCall
from runners.hostapi.handlers.model_calls import (
    model_of_kind,
    provider_refused,
    provider_timed_out,
    provider_unexpected,
    provider_unreachable,
)

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


_ClientKey = tuple[Any, ...]
_clients: dict[asyncio.AbstractEventLoop, dict[_ClientKey, openai.AsyncOpenAI]] = {}


def provider_client(provider: ModelProvider) -> openai.AsyncOpenAI:
    """The running loop's client for the provider as it is configured now. An edited provider gets a new
    client (streams in flight keep the old one until they end); clients of closed loops are dropped."""
    loop = asyncio.get_running_loop()
    for other in list(_clients):
        if other.is_closed():
            _clients.pop(other, None)
    clients = _clients.setdefault(loop, {})
    key = (
        provider.pk,
        provider.base_url,
        provider.api_key,
        json.dumps(provider.headers or {}, sort_keys=True),
        provider.timeout_seconds,
        provider.max_retries,
        # An operator who allows or withdraws private addresses changes which connections are made.
        provider_private_allowed(provider),
    )
    client = clients.get(key)
    if client is None:
        for stale in [other for other in clients if other[0] == provider.pk]:
            clients.pop(stale, None)
        client = clients[key] = async_openai_client(provider)
    return client


def call_timeout(call: ProxyCall, provider: ModelProvider) -> float:
    """The provider's timeout, shortened to what the run has left."""
    return min(float(provider.timeout_seconds), max(call.remaining(), 0.001))


async def llm_model(call: ProxyCall) -> Model:
    return await model_of_kind(call, Model.Kind.LLM)


def completion_arguments(request: InvokeLLMRequest, model: Model) -> dict[str, Any]:
    extra = dict(request.extra_args or {})
    refused = sorted(set(extra) - ALLOWED_EXTRA_ARGS)
    if refused:
        raise AgentAPIException.invalid_argument(
            f"extra_args not allowed: {', '.join(refused)}", refused=refused, allowed=sorted(ALLOWED_EXTRA_ARGS)
        )
    arguments: dict[str, Any] = {"model": model.name, "messages": [_openai_message(m) for m in request.messages]}
    if request.tools:
        arguments["tools"] = request.tools
    return {**arguments, **extra}


async def llm_invoke(call: ProxyCall) -> dict[str, Any]:
    model = await llm_model(call)
    arguments = completion_arguments(call.request, model)
    provider = model.provider
    client = provider_client(provider)
    try:
        completion = await client.chat.completions.create(**arguments, timeout=call_timeout(call, provider))
    except openai.APIError as exc:
        raise provider_error(provider, exc) from None
    except AddressRefusedError as exc:  # the SDK lets what is not its HTTP library's error through
        raise provider_unreachable(provider, exc) from None
    choice = completion.choices[0] if completion.choices else None
    message = _message_of(choice.message.model_dump(exclude_none=True)) if choice else {"role": "assistant"}
    usage = completion.usage.model_dump(exclude_none=True) if completion.usage else None
    call.session.usage.record(call.request.model_id, usage)
    return {
        "message": message,
        "usage": usage,
        "finish_reason": choice.finish_reason if choice else None,
    }


async def llm_stream(call: ProxyCall) -> AsyncIterator[dict[str, Any]]:
    model = await llm_model(call)
    arguments = completion_arguments(call.request, model)
    provider = model.provider
    client = provider_client(provider)
    # The SDK makes the request (auth, headers, retries of the connection, error answers); the body's
    # server-sent events are read here. The SDK's own stream builds typed objects per chunk, which cost the
    # worker more CPU than everything else it does per chunk (bench/model_proxy: 2,000 chunks flat out).
    manager = client.chat.completions.with_streaming_response.create(
        **arguments, stream=True, stream_options={"include_usage": True}, timeout=call_timeout(call, provider)
    )
    try:
        # Entered here, not in the generator, so a refusal (429, 401...) is the call's error, not a frame's.
        response = await manager.__aenter__()
    except openai.APIError as exc:
        raise provider_error(provider, exc) from None
    except AddressRefusedError as exc:
        raise provider_unreachable(provider, exc) from None
    return _chunks(manager, response.http_response, provider, call)


async def _chunks(
    manager: Any, response: httpx.Response, provider: ModelProvider, call: ProxyCall
) -> AsyncIterator[dict[str, Any]]:
    last_usage: dict[str, Any] | None = None
    ended = finished = False
    try:
        async for event in sse_events(response):
            if event.data.startswith("[DONE]"):
                finished = True
                break
            frame = _stream_frame(provider, event.data)
            choices = frame.get("choices") or []
            choice = choices[0] if choices and isinstance(choices[0], dict) else None
            usage = frame.get("usage") if isinstance(frame.get("usage"), dict) else None
            if choice is None and usage is None:
                continue
            if usage is not None:
                last_usage = usage
            finished = finished or bool(choice and choice.get("finish_reason"))
            yield {
                "delta": _delta_of(choice.get("delta") if choice is not None else None),
                "usage": usage,
                "finish_reason": choice.get("finish_reason") if choice is not None else None,
            }
        if not finished:
            # Neither `[DONE]` nor a finish reason: the provider went away mid-answer, and what arrived is
            # not the whole answer.
            raise AgentAPIException.runtime_error(
                "the model provider's stream ended before the answer was complete", retryable=True
            )
        ended = True
    except httpx.TimeoutException:
        seconds = provider.timeout_seconds
        raise AgentAPIException.deadline_exceeded(f"the model provider stopped sending for {seconds} s") from None
    except httpx.HTTPError as exc:
        message = redacted(provider, f"the model provider's stream broke: {exc}")
        raise AgentAPIException.runtime_error(message, retryable=True) from None
    finally:
        # Counted here so a stream its consumer stopped (or that broke) still records what arrived.
        call.session.usage.record(call.request.model_id, last_usage, partial=not ended or last_usage is None)
        # Closing a response not read to its end drops the provider's HTTP connection at once (the run was
        # cancelled or its deadline passed); one that ended leaves its connection to the client's pool.
        await manager.__aexit__(None, None, None)


def _stream_frame(provider: ModelProvider, data: str) -> dict[str, Any]:
    """One event's JSON chunk; an `{"error": ...}` event (a failure after the answer began) is raised."""
    try:
        frame = json.loads(data)
    except ValueError:
        raise provider_unexpected(provider, f"a stream event that is not JSON: {data[:200]!r}") from None
    if not isinstance(frame, dict):
        raise provider_unexpected(provider, f"a stream event that is not an object: {data[:200]!r}")
    error = frame.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise AgentAPIException.runtime_error(
            redacted(provider, f"the model provider failed mid-answer: {message}"), retryable=True
        )
    return frame


def _delta_of(raw: Any) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant"}
    if not isinstance(raw, dict):
        return delta
    delta["role"] = raw.get("role") or "assistant"
    if raw.get("content"):
        delta["content"] = raw["content"]
    if raw.get("tool_calls"):
        delta["tool_calls"] = [_tool_call_fragment(part) for part in raw["tool_calls"] if isinstance(part, dict)]
    return delta


def provider_error(provider: ModelProvider, exc: openai.APIError) -> AgentAPIException:
    """The SDK's failure as the runner sees it; no message carries the key."""
    if isinstance(exc, openai.APITimeoutError):
        return provider_timed_out(provider)
    if isinstance(exc, openai.APIConnectionError):
        return provider_unreachable(provider, exc.__cause__ or exc)
    if isinstance(exc, openai.APIStatusError):
        return provider_refused(
            provider,
            status=exc.status_code,
            provider_message=status_message(exc),
            retry_after=exc.response.headers.get("retry-after"),
        )
    return provider_unexpected(provider, exc)


def _openai_message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role}
    if isinstance(message.content, list):
        out["content"] = [_openai_part(part) for part in message.content]
    else:
        out["content"] = message.content
    if message.name:
        out["name"] = message.name
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": c.type, "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return out


def _openai_part(part: ContentElement) -> dict[str, Any]:
    if part.type == "text":
        return {"type": "text", "text": part.text or ""}
    if part.type == "image_url" and part.image_url:
        return {"type": "image_url", "image_url": {"url": part.image_url}}
    if part.type in ("image_base64", "image_url") and part.image_base64:
        data = part.image_base64
        url = data if data.startswith("data:") else f"data:{part.mime_type or 'image/png'};base64,{data}"
        return {"type": "image_url", "image_url": {"url": url}}
    raise AgentAPIException.invalid_argument(
        f"content part of type {part.type!r} cannot be sent to a model (text and images only)", type=part.type
    )


def _message_of(raw: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": raw.get("role") or "assistant", "content": raw.get("content")}
    if raw.get("tool_calls"):
        message["tool_calls"] = [
            {"id": c.get("id", ""), "type": c.get("type") or "function", "function": c.get("function") or {}}
            for c in raw["tool_calls"]
        ]
    return message


def _tool_call_fragment(part: dict[str, Any]) -> dict[str, Any]:
    function = part.get("function") or {}
    return {
        "index": part.get("index", 0),
        "id": part.get("id") or "",
        "type": part.get("type") or "function",
        "function": {"name": function.get("name") or "", "arguments": function.get("arguments") or ""},
    }
