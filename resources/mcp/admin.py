"""Admin of MCP servers: their settings (env and headers masked), how the last connection went (status
coloured, the last error in full), their cached tools (read-only), and a "Refresh tools" action that
connects now and shows the tool count or the server's error.

Superusers see everything; other staff see and edit only the servers of workspaces they belong to.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from bindings.selectors import workspaces_of_member
from resources.mcp.forms import MCPServerAdminForm
from resources.mcp.services import MCPServerDisabledError, MCPServerUnavailableError, mcp_server_refresh
from resources.models import MCPServer, MCPTool

_STATUS_COLOURS = {
    MCPServer.Status.OK: "#2e7d32",
    MCPServer.Status.ERROR: "#c62828",
    MCPServer.Status.UNKNOWN: "#757575",
}
# How many tool names a successful refresh shows before "and N more".
SHOWN_TOOL_NAMES = 20


def _is_superuser(request: HttpRequest) -> bool:
    return bool(getattr(request.user, "is_superuser", False))


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
class MCPServerAdmin(admin.ModelAdmin[MCPServer]):
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

    def get_queryset(self, request: HttpRequest) -> QuerySet[MCPServer]:
        queryset = super().get_queryset(request).select_related("workspace").prefetch_related("tools")
        if _is_superuser(request):
            return queryset
        return queryset.filter(workspace__in=workspaces_of_member(user_id=request.user.pk))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "workspace" and not _is_superuser(request):
            kwargs["queryset"] = workspaces_of_member(user_id=request.user.pk)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: MCPServer | None = None) -> list[str]:
        # The id names the server's tools when they collide: fixed once made.
        return [*self.readonly_fields, "workspace", "server_id"] if obj else list(self.readonly_fields)

    def get_prepopulated_fields(self, request: HttpRequest, obj: MCPServer | None = None) -> dict[str, Any]:
        return {} if obj else dict(self.prepopulated_fields)

    def save_model(self, request: HttpRequest, obj: MCPServer, form: Any, change: bool) -> None:
        assert isinstance(form, MCPServerAdminForm)
        obj.args = form.args
        obj.env = form.env
        obj.headers = form.headers
        super().save_model(request, obj, form, change)

    @admin.display(description="status", ordering="status")
    def status_coloured(self, obj: MCPServer) -> str:
        colour = _STATUS_COLOURS.get(MCPServer.Status(obj.status), "#757575")
        return format_html('<b style="color: {}">{}</b>', colour, obj.get_status_display())

    @admin.display(description="tools")
    def tool_count(self, obj: MCPServer) -> int:
        return len(obj.tools.all())

    @admin.display(description="last error")
    def last_error_short(self, obj: MCPServer) -> str:
        return obj.last_error if len(obj.last_error) <= 120 else obj.last_error[:119] + "…"

    @admin.action(description="Refresh tools (connect now and list them)")
    def refresh_tools(self, request: HttpRequest, queryset: QuerySet[MCPServer]) -> None:
        for server in queryset:
            try:
                mcp_server_refresh(server=server)
            except MCPServerDisabledError:
                messages.warning(request, f"{server.server_id}: disabled; enable it to refresh its tools.")
                continue
            except MCPServerUnavailableError as exc:
                messages.error(request, f"{server.server_id}: {exc.message}")
                continue
            names = list(server.tools.order_by("position").values_list("tool_name", flat=True))
            shown = ", ".join(names[:SHOWN_TOOL_NAMES]) or "(none)"
            more = f" and {len(names) - SHOWN_TOOL_NAMES} more" if len(names) > SHOWN_TOOL_NAMES else ""
            messages.success(request, f"{server.server_id}: connected; {len(names)} tool(s): {shown}{more}")
