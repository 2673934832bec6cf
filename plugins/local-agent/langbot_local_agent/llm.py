"""Model calls with ordered fallback.

The chain is the primary model then the fallbacks, each only if the run may use it. A call moves to the
next model when the current one fails *before its first streamed chunk* (nothing of it reached the
user, so another model can answer instead); once a chunk has arrived, a failure ends the turn — a
second model would start a different answer in the middle of the first. A non-streamed call falls back
on any failure. Each call is bounded by the configured timeout, measured per chunk while streaming so a
long answer that keeps flowing is not cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.protocol import AgentAPIException, AgentRunContext, LLMStreamChunk
from langbot_sdk.proxy import AgentRunAPIProxy


@dataclass
class ModelFailure:
    model_id: str
    code: str
    message: str
    retryable: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "code": self.code, "message": self.message, "retryable": self.retryable}


class ModelCallError(Exception):
    """Every model of the chain failed, or one failed after its first chunk (`after_first_chunk`)."""

    def __init__(self, failures: list[ModelFailure], *, after_first_chunk: bool) -> None:
        self.failures = failures
        self.after_first_chunk = after_first_chunk
        last = failures[-1] if failures else ModelFailure("", "runtime_error", "no model to call")
        where = "while streaming" if after_first_chunk else "on every model tried"
        super().__init__(f"model {last.model_id or '-'} failed {where}: {last.code}: {last.message}")

    @property
    def last(self) -> ModelFailure:
        return self.failures[-1] if self.failures else ModelFailure("", "runtime_error", "no model to call")


@dataclass
class ModelReply:
    model_id: str
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Complete OpenAI-style calls: `{"id", "type": "function", "function": {"name", "arguments"}}`."""
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    failures: list[ModelFailure] = field(default_factory=list)
    """Models tried before this one answered."""

    def assistant_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


def model_chain(ctx: AgentRunContext, wanted: Sequence[str]) -> list[str]:
    """The wanted models the run may call (the host authorized them from the config's selections). With
    no model picked in the config, the chat models the binding allows (`ctx.resources.models`, in the
    host's order): an empty selector means "what the binding allows", as the host reads it too."""
    if not wanted:
        return [m.model_id for m in ctx.resources.models if m.kind == "llm"]
    return [model_id for model_id in wanted if ctx.resources.find_model(model_id) is not None]


def _failure(model_id: str, exc: BaseException, timeout: float) -> ModelFailure:
    if isinstance(exc, AgentAPIException):
        return ModelFailure(model_id, exc.error.code, exc.error.message, exc.error.retryable)
    if isinstance(exc, TimeoutError):
        return ModelFailure(model_id, "deadline_exceeded", f"no answer within {timeout:g} s", True)
    return ModelFailure(model_id, "runtime_error", f"{type(exc).__name__}: {exc}")


class _Assembly:
    """Joins streamed chunks: text, tool-call fragments by index, the last usage and finish reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    def add(self, chunk: LLMStreamChunk) -> str:
        if chunk.usage:
            self.usage = chunk.usage
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        for position, fragment in enumerate(chunk.delta.tool_calls or []):
            index = fragment.index if fragment.index is not None else position
            call = self.calls.setdefault(
                index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            call["id"] = call["id"] or fragment.id
            call["function"]["name"] = call["function"]["name"] or fragment.function.name
            call["function"]["arguments"] += fragment.function.arguments
        text = chunk.delta.text()
        if text:
            self.text.append(text)
        return text

    def reply(self, model_id: str, failures: list[ModelFailure]) -> ModelReply:
        calls = [self.calls[i] for i in sorted(self.calls) if self.calls[i]["function"]["name"]]
        return ModelReply(model_id, "".join(self.text), calls, self.usage, self.finish_reason, list(failures))


async def model_stream(
    api: AgentRunAPIProxy,
    chain: Sequence[str],
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None,
    timeout: float,
) -> AsyncIterator[str | ModelReply]:
    """Yield the answer's text fragments as they arrive, then one `ModelReply`; raises `ModelCallError`."""
    failures: list[ModelFailure] = []
    for model_id in chain:
        assembly = _Assembly()
        started = False
        stream = api.models.stream(model_id, messages, tools=tools or None)
        try:
            while True:
                try:
                    chunk = await asyncio.wait_for(anext(stream), timeout)
                except StopAsyncIteration:
                    break
                started = True
                text = assembly.add(chunk)
                if text:
                    yield text
        except (AgentAPIException, TimeoutError) as exc:
            failures.append(_failure(model_id, exc, timeout))
            if started:
                raise ModelCallError(failures, after_first_chunk=True) from None
            continue
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                # Closing the stream closes the provider's connection at the host at once.
                await aclose()
        yield assembly.reply(model_id, failures)
        return
    raise ModelCallError(failures, after_first_chunk=False)


async def model_invoke(
    api: AgentRunAPIProxy,
    chain: Sequence[str],
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None,
    timeout: float,
) -> ModelReply:
    """One whole answer, trying the chain in order; raises `ModelCallError` when every model failed."""
    failures: list[ModelFailure] = []
    for model_id in chain:
        try:
            result = await asyncio.wait_for(api.models.invoke(model_id, messages, tools=tools or None), timeout)
        except (AgentAPIException, TimeoutError) as exc:
            failures.append(_failure(model_id, exc, timeout))
            continue
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in result.message.tool_calls or []
            if c.function.name
        ]
        return ModelReply(model_id, result.message.text(), calls, result.usage, result.finish_reason, failures)
    raise ModelCallError(failures, after_first_chunk=False)


def usage_add(total: dict[str, int], usage: dict[str, Any] | None) -> None:
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = (usage or {}).get(key)
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value
