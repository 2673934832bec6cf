"""A hostile runner for the run isolation tests (tests/conformance/test_run_isolation.py): it tries to act for
runs that are not its own and replies, as JSON, what came back for each call.

Modes (binding config `mode`):
- `whoami`: replies its own run id, run token and plugin identity, so a test can replay them later.
- `wire`: sends each call on its own host channel, naming `target_run_id` in the payload (`"$self"`: its own
  run, the control case).
- `sdk`: builds the SDK proxy for a copy of its context whose run id is `target_run_id`, as a runner author
  could (`self.run_api(ctx.model_copy(update={"run_id": target}))`), and sends each call through it.
- `sdk_own_channel`: the same copy, but handed its own host channel explicitly.
- `raw`: sends each call's data as it is on the runtime's connection, stamped by nothing: the test chooses
  the run id, token and caller identity (forged or replayed credentials); `"$self"` in `run_id` stands for
  this run's id and `"$identity"` in `caller_plugin_identity` for this plugin's identity.

Calls go through the proxy's generic path so that every wire action, streamed or not, is tried the same way.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from langbot_sdk.protocol import Action, AgentAPIException, AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy, HostChannel, channel_for_run
from langbot_sdk.runner import AgentRunner

STREAMING = frozenset({Action.INVOKE_LLM_STREAM, Action.ARTIFACT_STREAM})


class _Anything(BaseModel):
    model_config = ConfigDict(extra="allow")


class IntruderRunner(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        mode = str(ctx.config.get("mode") or "whoami")
        channel = channel_for_run(ctx.run_id)
        assert channel is not None, "the runtime binds the run's channel before run() starts"
        if mode == "whoami":
            stamp = getattr(channel, "_stamp", {})
            report: Any = {"run_id": ctx.run_id, **stamp}
        else:
            calls = [c for c in ctx.config.get("calls") or [] if isinstance(c, dict)]
            report = {str(c.get("action")): await self._try(ctx, channel, mode, c) for c in calls}
        yield AgentRunResult.message_completed(ctx.run_id, json.dumps(report, sort_keys=True))

    async def _try(self, ctx: AgentRunContext, channel: HostChannel, mode: str, call: dict[str, Any]) -> Any:
        action = Action(str(call.get("action")))
        data = dict(call.get("data") or {})
        target = str(ctx.config.get("target_run_id") or "")
        if target == "$self":
            target = ctx.run_id
        try:
            if mode == "wire":
                return await _send(channel, action, {**data, "run_id": target})
            if mode == "raw":
                raw = getattr(channel, "_connection")  # noqa: B009 (the attack reaches past the public surface)
                if data.get("run_id") == "$self":
                    data["run_id"] = ctx.run_id
                if data.get("caller_plugin_identity") == "$identity":
                    data["caller_plugin_identity"] = getattr(channel, "identity", "")
                return await _send(raw, action, data)
            forged = ctx.model_copy(update={"run_id": target})
            proxy = self.run_api(forged) if mode == "sdk" else AgentRunAPIProxy(forged, channel)
            fields = {k: v for k, v in data.items() if k != "run_id"}
            if action in STREAMING:
                return {"chunks": len([c async for c in proxy._stream(action, fields, _Anything)])}
            return {"ok": (await proxy._call(action, fields, _Anything)).model_dump() is not None}
        except AgentAPIException as exc:
            return {"code": exc.error.code, "message": exc.error.message}


async def _send(channel: Any, action: Action, data: dict[str, Any]) -> Any:
    if action in STREAMING:
        return {"chunks": len([c async for c in channel.stream(action.value, data, timeout=30)])}
    answer = await channel.call(action.value, data, timeout=30)
    return {"ok": True, "keys": sorted(answer)}
