"""A runner for the model usage tests (tests/integration/test_model_usage.py): it calls its selected model
twice through `api.models` — once whole, once streamed — and replies with both answers, reporting no usage
of its own beyond a marker, so the test sees what the host counted apart from what the runner said."""

from __future__ import annotations

from collections.abc import AsyncIterator

from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.runner import AgentRunner


class ModelCallerRunner(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        model_id = str(ctx.config.get("model") or "")
        messages = [{"role": "user", "content": "hi"}]
        whole = await api.models.invoke(model_id, messages)
        streamed = "".join([chunk.delta.text() async for chunk in api.models.stream(model_id, messages)])
        yield AgentRunResult.message_completed(ctx.run_id, f"{whole.message.text()}|{streamed}")
        yield AgentRunResult.run_completed(ctx.run_id, usage={"reported_by": "runner"})
