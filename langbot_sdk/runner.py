"""The `AgentRunner` base class that plugin runners subclass.

A runner is one long-lived instance per runner id in the plugin runtime; the runtime calls `run(ctx)` once
per run, possibly many times concurrently, so per-run data lives in locals or in `ctx`, never on `self`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy, channel_for_run

__all__ = ["AgentRunner"]


class AgentRunner:
    """Base class of a plugin-provided agent runner.

    Subclass it and implement `run` as an async generator that yields `AgentRunResult` objects (or dicts of
    the same shape). The runtime stamps `run_id`, `sequence` and `timestamp`, validates every result and
    appends `run.completed` when the generator ends without a terminal result.
    """

    def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult | dict[str, Any]]:
        """Execute one run and yield its results; override with `async def run(self, ctx): ... yield ...`."""
        raise NotImplementedError(f"{type(self).__name__} must implement run(ctx)")

    def run_api(self, ctx: AgentRunContext) -> AgentRunAPIProxy:
        """The host API proxy for this run, bound to `ctx.run_id` and its authorized resources.

        Works only while the run is active in the runtime (the runtime binds the host connection that
        started the run); calls after the run ended fail with `AgentAPIException`.
        """
        return AgentRunAPIProxy(ctx, channel_for_run(ctx.run_id))
