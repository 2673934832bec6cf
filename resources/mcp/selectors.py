"""Reads for MCP servers and their tools, and the masked views of a server's secrets (what the API and
admin may show)."""

from __future__ import annotations

from django.db.models import QuerySet

from bindings.models import Workspace
from foundation.crypto import SECRET_MASK
from resources.models import MCPServer, MCPTool


def mcp_server_list(*, workspace: Workspace) -> QuerySet[MCPServer]:
    return MCPServer.objects.filter(workspace=workspace).prefetch_related("tools").order_by("server_id")


def mcp_server_get(*, workspace: Workspace, server_id: str) -> MCPServer | None:
    return MCPServer.objects.filter(workspace=workspace, server_id=server_id).prefetch_related("tools").first()


def mcp_server_env_masked(server: MCPServer) -> dict[str, str]:
    return dict.fromkeys(server.env or {}, SECRET_MASK)


def mcp_server_headers_masked(server: MCPServer) -> dict[str, str]:
    return dict.fromkeys(server.headers or {}, SECRET_MASK)


def mcp_server_tools(server: MCPServer) -> list[MCPTool]:
    """The server's cached tools in the server's own order (prefetched ones when there are)."""
    return sorted(server.tools.all(), key=lambda tool: (tool.position, tool.tool_name))


def mcp_tool_list(*, workspace: Workspace) -> QuerySet[MCPTool]:
    """The tools runs of the workspace may be allowed: those of its enabled servers, by name."""
    return (
        MCPTool.objects.filter(workspace=workspace, server__enabled=True).select_related("server").order_by("tool_name")
    )


def mcp_tool_for_call(*, workspace_id: int, tool_name: str) -> MCPTool | None:
    """A tool a run calls, with its server and workspace; None when the tool or its server is gone or disabled (since
    the run started, say)."""
    return (
        MCPTool.objects.filter(workspace_id=workspace_id, tool_name=tool_name, server__enabled=True)
        # The workspace too: the call's connection config reads its private-address flag.
        .select_related("server__workspace")
        .first()
    )


def tools_by_name(*, workspace_id: int, tool_names: list[str] | None) -> dict[str, MCPTool]:
    """The workspace's tools of enabled servers among `tool_names` (all of them when None: a policy that
    allows every tool), keyed by tool name, with their servers (a tool's source is `mcp:<server_id>`), in one
    query (the run's snapshot)."""
    rows = (
        MCPTool.objects.filter(workspace_id=workspace_id, server__enabled=True)
        .select_related("server")
        .order_by("tool_name")
    )
    if tool_names is not None:
        rows = rows.filter(tool_name__in=tool_names)
    return {row.tool_name: row for row in rows}
