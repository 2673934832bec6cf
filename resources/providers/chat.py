"""Chat completions against a model's OpenAI-compatible provider, whole (`chat_complete`) or streamed
(`chat_stream`): protocol messages turned into the provider's request, its answer (or each chunk, as it
arrives) turned back into the protocol's message and delta shapes, and its failures into typed
`AgentAPIException`s whose messages never carry the provider's key (`failures`).

A stream is closed at the provider as soon as its consumer stops: closing the generator (a cancelled run,
a passed deadline) runs its `finally`, which closes the HTTP response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

import httpx
import httpx2
import openai
from httpx_sse import EventSource, SSEError

from foundation.outbound import AddressRefusedError
from langbot_sdk.protocol import AgentAPIException, ContentElement, Message
from resources.models import Model, ModelProvider
from resources.providers.clients import provider_client
from resources.providers.failures import provider_error, provider_unexpected, provider_unreachable, redacted


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    message: dict[str, Any]
    usage: dict[str, Any] | None
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One streamed chunk: a delta (always with its role), the usage when the provider sent it."""

    delta: dict[str, Any]
    usage: dict[str, Any] | None
    finish_reason: str | None


def _request(
    model: Model, messages: Sequence[Message], tools: list[dict[str, Any]] | None, options: Mapping[str, Any]
) -> dict[str, Any]:
    arguments: dict[str, Any] = {"model": model.name, "messages": [_openai_message(m) for m in messages]}
    if tools:
        arguments["tools"] = tools
    return {**arguments, **options}


async def chat_complete(
    *,
    model: Model,
    messages: Sequence[Message],
    tools: list[dict[str, Any]] | None,
    options: Mapping[str, Any],
    timeout: float,
) -> ChatAnswer:
    """The whole answer, within `timeout` seconds; `options` (temperature...) go to the provider as they are."""
    request = _request(model, messages, tools, options)
    provider = model.provider
    try:
        completion = await provider_client(provider).chat.completions.create(**request, timeout=timeout)
    except openai.APIError as exc:
        raise provider_error(provider, exc) from None
    except AddressRefusedError as exc:  # the SDK lets what is not its HTTP library's error through
        raise provider_unreachable(provider, exc) from None
    choice = completion.choices[0] if completion.choices else None
    message = _message_of(choice.message.model_dump(exclude_none=True)) if choice else {"role": "assistant"}
    usage = completion.usage.model_dump(exclude_none=True) if completion.usage else None
    return ChatAnswer(message=message, usage=usage, finish_reason=choice.finish_reason if choice else None)


async def chat_stream(
    *,
    model: Model,
    messages: Sequence[Message],
    tools: list[dict[str, Any]] | None,
    options: Mapping[str, Any],
    timeout: float,
) -> AsyncGenerator[ChatChunk, None]:
    """The answer's chunks as they arrive, the usage in the last ones. A refusal (429, 401...) raises here,
    before the first chunk; a failure after the answer began raises from the generator."""
    request = _request(model, messages, tools, options)
    provider = model.provider
    # The SDK makes the request (auth, headers, retries of the connection, error answers); the body's
    # server-sent events are read here. The SDK's own stream builds typed objects per chunk, which cost the
    # worker more CPU than everything else it does per chunk (bench/model_proxy: 2,000 chunks flat out).
    manager = provider_client(provider).chat.completions.with_streaming_response.create(
        **request, stream=True, stream_options={"include_usage": True}, timeout=timeout
    )
    try:
        response = await manager.__aenter__()
    except openai.APIError as exc:
        raise provider_error(provider, exc) from None
    except AddressRefusedError as exc:
        raise provider_unreachable(provider, exc) from None
    return _chunks(manager, response.http_response, provider)


async def _chunks(manager: Any, response: httpx2.Response, provider: ModelProvider) -> AsyncGenerator[ChatChunk, None]:
    finished = False
    try:
        # httpx-sse reads any response with httpx's interface; the SDK's is httpx2's, which has it.
        async with aclosing(EventSource(cast(httpx.Response, response)).aiter_sse()) as events:
            async for event in events:
                if event.data.startswith("[DONE]"):
                    finished = True
                    break
                frame = _stream_frame(provider, event.data)
                choices = frame.get("choices") or []
                choice = choices[0] if choices and isinstance(choices[0], dict) else None
                usage = frame.get("usage") if isinstance(frame.get("usage"), dict) else None
                if choice is None and usage is None:
                    continue
                finish_reason = choice.get("finish_reason") if choice is not None else None
                finished = finished or bool(finish_reason)
                yield ChatChunk(
                    delta=_delta_of(choice.get("delta") if choice is not None else None),
                    usage=usage,
                    finish_reason=finish_reason,
                )
        if not finished:
            # Neither `[DONE]` nor a finish reason: the provider went away mid-answer, and what arrived is
            # not the whole answer.
            raise AgentAPIException.runtime_error(
                "the model provider's stream ended before the answer was complete", retryable=True
            )
    except SSEError as exc:  # not a `text/event-stream` answer
        raise provider_unexpected(provider, exc) from None
    except httpx2.TimeoutException:
        seconds = provider.timeout_seconds
        raise AgentAPIException.deadline_exceeded(f"the model provider stopped sending for {seconds} s") from None
    except httpx2.HTTPError as exc:
        message = redacted(provider, f"the model provider's stream broke: {exc}")
        raise AgentAPIException.runtime_error(message, retryable=True) from None
    finally:
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
