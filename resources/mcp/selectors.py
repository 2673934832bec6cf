"""Reads for MCP servers and their tools."""

from __future__ import annotations

from resources.models import MCPTool


def tools_by_name(*, workspace_id: int, tool_names: list[str] | None) -> dict[str, MCPTool]:
    """The workspace's tools of enabled servers among `tool_names` (all of them when None: a policy that
    allows every tool), keyed by tool name, in one query (the run's snapshot)."""
    rows = (
        MCPTool.objects.filter(workspace_id=workspace_id, server__enabled=True)
        .select_related("server")
        .order_by("tool_name")
    )
    if tool_names is not None:
        rows = rows.filter(tool_name__in=tool_names)
    return {row.tool_name: row for row in rows}
