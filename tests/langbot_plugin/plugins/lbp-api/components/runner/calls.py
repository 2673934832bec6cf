"""A Runner that calls the host through `ctx.api` as LangBot's SDK exposes it and replies with one line per
call: what came back, or the error the SDK raised. Calls: `echo` (a tool that answers), `fail` (a tool that
reports an error), `missing` (a tool the run is not granted: refused by the SDK itself), the rerank model,
a token count, the host's version."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.provider.message import Message
from langbot_plugin.api.entities.builtin.runner import RunnerContext, RunnerResult


class CallsRunner(Runner):
    async def run(self, ctx: RunnerContext) -> AsyncGenerator[RunnerResult, None]:
        lines = []

        async def attempt(name, call):
            try:
                lines.append(f"{name}: {json.dumps(await call, sort_keys=True)}")
            except Exception as exc:
                lines.append(f"{name} raised {type(exc).__name__}: {exc}")

        await attempt("detail", ctx.api.get_tool_detail("echo"))
        await attempt("echo", ctx.api.call_tool("echo", {"text": "hi"}))
        await attempt("fail", ctx.api.call_tool("fail", {"message": "boom"}))
        rerank_model = ctx.config.get("rerank_model")
        await attempt("rerank", ctx.api.invoke_rerank(rerank_model, "dogs", ["cats", "dogs bark"], top_k=1))
        await attempt("version", ctx.api.get_langbot_version())
        reply = "\n".join(lines)
        yield RunnerResult.run_completed(ctx.run_id, message=Message(role="assistant", content=reply))
