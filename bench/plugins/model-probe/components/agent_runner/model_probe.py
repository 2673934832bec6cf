"""A benchmark runner (bench/model_proxy.py): it times calls of its model through the host's proxy
(`api.models.invoke` / `api.models.stream`: runtime → host → provider → host → runtime) against the same
request sent from this process straight to the provider with the `openai` SDK (one long-lived client, as a
runner calling a provider itself would keep), alternating which goes first, and replies with the raw
timings as JSON in its completed message.

Input text, JSON: `{"phase": "invoke" | "stream", "count": n, "warmup": n, "base_url": provider URL,
"model_name": the provider's model name, "chunks": n, "interval_ms": ms, "paths": ["proxy", "direct"]}` (the
paths to time, both by default). A stream asks the bench's fake
provider (bench/_fake_provider.py) for `chunks` tokens `interval_ms` apart.

Reply: `{"phase", "proxy": samples, "direct": samples}`, samples `{"total": [s], "first": [s], "tokens": [n],
"frames": [n]}` — seconds from the call to its answer (invoke) or to the stream's end, to the first chunk
(streams), and per stream the chunks carrying text and all chunks received.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam

from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.runner import AgentRunner

Samples = dict[str, list[float]]
Timed = Callable[[], Awaitable[tuple[float, float, int, int]]]


def _samples() -> Samples:
    return {"total": [], "first": [], "tokens": [], "frames": []}


def _add(samples: Samples, measured: tuple[float, float, int, int]) -> None:
    total, first, tokens, frames = measured
    samples["total"].append(round(total, 7))
    samples["first"].append(round(first, 7))
    samples["tokens"].append(tokens)
    samples["frames"].append(frames)


class ModelProbe(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        spec: dict[str, Any] = json.loads(ctx.input.text or "{}")
        api = self.run_api(ctx)
        model_id = str(ctx.config.get("model") or "")
        phase = str(spec.get("phase", "invoke"))
        model_name = str(spec["model_name"])
        if phase == "stream":
            text = f"chunks={int(spec.get('chunks', 2000))} interval_ms={float(spec.get('interval_ms', 0))}"
        else:
            text = "ping"
        messages = [{"role": "user", "content": text}]
        direct_messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": text}]
        direct = openai.AsyncOpenAI(base_url=str(spec["base_url"]), api_key="bench", max_retries=0, timeout=60)

        async def proxy_invoke() -> tuple[float, float, int, int]:
            started = time.perf_counter()
            answer = await api.models.invoke(model_id, messages)
            total = time.perf_counter() - started
            return total, total, int(bool(answer.message.text())), 1

        async def direct_invoke() -> tuple[float, float, int, int]:
            started = time.perf_counter()
            answer = await direct.chat.completions.create(model=model_name, messages=direct_messages)
            total = time.perf_counter() - started
            return total, total, int(bool(answer.choices[0].message.content)), 1

        async def proxy_stream() -> tuple[float, float, int, int]:
            started = time.perf_counter()
            first = 0.0
            tokens = frames = 0
            async for chunk in api.models.stream(model_id, messages):
                if not frames:
                    first = time.perf_counter() - started
                frames += 1
                tokens += bool(chunk.delta.text())
            return time.perf_counter() - started, first, tokens, frames

        async def direct_stream() -> tuple[float, float, int, int]:
            started = time.perf_counter()
            first = 0.0
            tokens = frames = 0
            stream = await direct.chat.completions.create(
                model=model_name,
                messages=direct_messages,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                if not frames:
                    first = time.perf_counter() - started
                frames += 1
                tokens += bool(chunk.choices and chunk.choices[0].delta.content)
            return time.perf_counter() - started, first, tokens, frames

        proxied, straight = (proxy_stream, direct_stream) if phase == "stream" else (proxy_invoke, direct_invoke)
        results: dict[str, Samples] = {"proxy": _samples(), "direct": _samples()}
        paths = set(spec.get("paths", ["proxy", "direct"]))
        try:
            both: list[tuple[str, Timed]] = [("proxy", proxied), ("direct", straight)]
            order = [(name, call) for name, call in both if name in paths]
            for _ in range(int(spec.get("warmup", 5))):
                for _name, call in order:
                    await call()
            for index in range(int(spec.get("count", 200))):
                # Alternate which path goes first, so neither always runs right after the other.
                for name, call in order if index % 2 == 0 else reversed(order):
                    _add(results[name], await call())
        finally:
            await direct.close()
        yield AgentRunResult.message_completed(ctx.run_id, json.dumps({"phase": phase, **results}))
        yield AgentRunResult.run_completed(ctx.run_id)
