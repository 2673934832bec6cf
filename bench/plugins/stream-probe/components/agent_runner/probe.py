"""A benchmark runner: per step it emits a `message.delta` whose text is `<emit ms>` and a
`tool_call.started` whose parameters carry `emitted_ms`, then sleeps. Input `probe:<steps>:<interval ms>`;
`probe:<steps>:<interval ms>:deltas` emits only the deltas, at a steady pace (step i at start + i × interval),
as a model streaming tokens does.

The stamps let a client measure runner emit → receipt; deltas the host merged carry all their stamps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.runner import AgentRunner


class StreamProbe(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        parts = (ctx.input.text or "").split(":")
        steps = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 20
        interval = (int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 50) / 1000
        if len(parts) > 3 and parts[3] == "deltas":
            started = time.monotonic()
            for step in range(steps):
                yield AgentRunResult.message_delta(ctx.run_id, f"<{time.time() * 1000:.3f}>")
                await asyncio.sleep(max(0.0, started + (step + 1) * interval - time.monotonic()))
            yield AgentRunResult.run_completed(ctx.run_id)
            return
        for step in range(steps):
            yield AgentRunResult.message_delta(ctx.run_id, f"<{time.time() * 1000:.3f}>")
            stamp = time.time() * 1000
            yield AgentRunResult.tool_call_started(ctx.run_id, f"t{step}", "probe", {"emitted_ms": stamp})
            await asyncio.sleep(interval)
        yield AgentRunResult.message_completed(ctx.run_id, "done")
        yield AgentRunResult.run_completed(ctx.run_id)
