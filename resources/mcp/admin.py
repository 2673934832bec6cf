"""Admin of MCP servers: their settings (env and headers masked), how the last connection went (status
coloured, `connecting` while a worker connects after a save, the last error in full), their cached tools
(read-only), and a "Refresh tools" action that connects now and shows the tool count or the server's error
(a stdio server's in a worker, as REST does). A save connects in the background as a REST one does.

Superusers see everything; other staff see and edit only the servers of workspaces they belong to.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from resources.mcp.forms import MCPServerAdminForm
from resources.mcp.policy import MCPStdioRefusedError
from resources.mcp.refresh import MCPServerDisabledError, MCPServerUnavailableError
from resources.mcp.services import (
    MCPRefreshPendingError,
    mcp_server_connection,
    mcp_server_refresh_requested,
    mcp_server_saved,
)
from resources.models import MCPServer, MCPTool

_STATUS_COLOURS = {
    MCPServer.Status.OK: "#2e7d32",
    MCPServer.Status.ERROR: "#c62828",
    MCPServer.Status.UNKNOWN: "#757575",
    MCPServer.Status.CONNECTING: "#ef6c00",
}
# How many tool names a successful refresh shows before "and N more".
SHOWN_TOOL_NAMES = 20


class MCPToolInline(admin.TabularInline[MCPTool, MCPServer]):
    """The server's tools as the last refresh stored them; they change only by refreshing."""

    model = MCPTool
    fields = ["tool_name", "remote_name", "description", "parameters", "position"]
    readonly_fields = ["tool_name", "remote_name", "description", "parameters", "position"]
    extra = 0
    can_delete = False
    ordering = ["position"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MCPServer)
class MCPServerAdmin(WorkspaceScopedAdmin[MCPServer]):
    form = MCPServerAdminForm
    inlines = [MCPToolInline]
    list_display = [
        "server_id",
        "workspace",
        "name",
        "transport",
        "enabled",
        "status_coloured",
        "tool_count",
        "last_error_short",
        "tools_refreshed_at",
    ]
    list_filter = ["status", "transport", "enabled", "workspace"]
    search_fields = ["server_id", "name", "command", "url"]
    prepopulated_fields = {"server_id": ["name"]}
    readonly_fields = ["status_coloured", "last_error", "tools_refreshed_at", "created_at", "updated_at"]
    actions = ["refresh_tools"]

    # The id names the server's tools when they collide: fixed once made.
    fixed_fields = ("workspace", "server_id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[MCPServer]:
        return super().get_queryset(request).prefetch_related("tools")

    def save_model(self, request: HttpRequest, obj: MCPServer, form: Any, change: bool) -> None:
        assert isinstance(form, MCPServerAdminForm)
        # The form has already put its values on `obj`: how it connected before is the stored row's.
        stored = MCPServer.objects.filter(pk=obj.pk).first() if change else None
        connection_before = mcp_server_connection(stored) if stored is not None else None
        obj.args = form.args
        obj.env = form.env
        obj.headers = form.headers
        super().save_model(request, obj, form, change)
        mcp_server_saved(server=obj, connection_before=connection_before)

    @admin.display(description=_("status"), ordering="status")
    def status_coloured(self, obj: MCPServer) -> str:
        colour = _STATUS_COLOURS.get(MCPServer.Status(obj.status), "#757575")
        return format_html('<b style="color: {}">{}</b>', colour, obj.get_status_display())

    @admin.display(description=_("tools"))
    def tool_count(self, obj: MCPServer) -> int:
        return len(obj.tools.all())

    @admin.display(description=_("last error"))
    def last_error_short(self, obj: MCPServer) -> str:
        return obj.last_error if len(obj.last_error) <= 120 else obj.last_error[:119] + "…"

    @admin.action(description=_("Refresh tools (connect now and list them)"))
    def refresh_tools(self, request: HttpRequest, queryset: QuerySet[MCPServer]) -> None:
        for server in queryset:
            try:
                mcp_server_refresh_requested(server=server)
            except MCPServerDisabledError:
                messages.warning(
                    request,
                    gettext("%(server)s: disabled; enable it to refresh its tools.") % {"server": server.server_id},
                )
                continue
            except MCPRefreshPendingError:
                messages.warning(
                    request,
                    gettext("%(server)s: a worker is still refreshing; its status will show.")
                    % {"server": server.server_id},
                )
                continue
            except (MCPServerUnavailableError, MCPStdioRefusedError) as exc:
                messages.error(request, f"{server.server_id}: {exc.message}")
                continue
            names = list(server.tools.order_by("position").values_list("tool_name", flat=True))
            shown = ", ".join(names[:SHOWN_TOOL_NAMES]) or gettext("(none)")
            extra = len(names) - SHOWN_TOOL_NAMES
            more = gettext(" and %(count)d more") % {"count": extra} if extra > 0 else ""
            connected = gettext("%(server)s: connected; %(count)d tool(s): %(shown)s%(more)s")
            messages.success(
                request, connected % {"server": server.server_id, "count": len(names), "shown": shown, "more": more}
            )
