"""A benchmark runner: per step it emits a `message.delta` whose text is `<emit ms>` and a
`tool_call.started` whose parameters carry `emitted_ms`, then sleeps. Input `probe:<steps>:<interval ms>`.

The tool call right after each delta flushes the host's delta coalescing, so both arrive as soon as the
host has persisted and published them; the stamps let a client measure runner emit → receipt.
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
        for step in range(steps):
            yield AgentRunResult.message_delta(ctx.run_id, f"<{time.time() * 1000:.3f}>")
            stamp = time.time() * 1000
            yield AgentRunResult.tool_call_started(ctx.run_id, f"t{step}", "probe", {"emitted_ms": stamp})
            await asyncio.sleep(interval)
        yield AgentRunResult.message_completed(ctx.run_id, "done")
        yield AgentRunResult.run_completed(ctx.run_id)
