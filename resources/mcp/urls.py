"""Routes of MCP servers and tools under `/api/v1/`."""

from django.urls import path

from resources.mcp.api import MCPServerDetailApi, MCPServerListApi, MCPServerRefreshApi, ToolListApi

urlpatterns = [
    path("mcp-servers", MCPServerListApi.as_view(), name="mcp-server-list"),
    path("mcp-servers/<slug:server_id>", MCPServerDetailApi.as_view(), name="mcp-server-detail"),
    path("mcp-servers/<slug:server_id>/refresh", MCPServerRefreshApi.as_view(), name="mcp-server-refresh"),
    path("tools", ToolListApi.as_view(), name="tool-list"),
]
