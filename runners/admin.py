"""Admin for runner descriptors: read-only, with a "Refresh from runtime" button on the list."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from langbot_sdk.protocol import AgentAPIException
from runners.models import RunnerDescriptor
from runners.services import runner_descriptors_refresh


@admin.register(RunnerDescriptor)
class RunnerDescriptorAdmin(admin.ModelAdmin[RunnerDescriptor]):
    change_list_template = "admin/runners/runnerdescriptor/change_list.html"
    list_display = ["runner_id", "label_display", "plugin_version", "status", "last_seen_at"]
    list_filter = ["status", "plugin_author"]
    search_fields = ["runner_id", "plugin_name", "runner_name"]
    fields = readonly_fields = (
        "runner_id", "label", "description", "plugin_author", "plugin_name", "plugin_version", "runner_name",
        "status", "load_error_display", "capabilities_display", "permissions_display", "context_display",
        "config_schema_display", "manifest_sha256", "last_seen_at", "created_at", "updated_at",
    )

    @admin.display(description="label")
    def label_display(self, obj: RunnerDescriptor) -> str:
        return obj.label_text()

    @admin.display(description="load error")
    def load_error_display(self, obj: RunnerDescriptor) -> str:
        return format_html('<pre style="white-space:pre-wrap">{}</pre>', obj.load_error or "—")

    def _json(self, value: Any) -> str:
        pretty = json.dumps(value, indent=2, ensure_ascii=False)
        return format_html('<pre style="white-space:pre-wrap">{}</pre>', pretty)

    @admin.display(description="capabilities")
    def capabilities_display(self, obj: RunnerDescriptor) -> str:
        return self._json(obj.capabilities)

    @admin.display(description="permissions")
    def permissions_display(self, obj: RunnerDescriptor) -> str:
        return self._json(obj.permissions)

    @admin.display(description="context policy")
    def context_display(self, obj: RunnerDescriptor) -> str:
        return self._json(obj.context_policy)

    @admin.display(description="config schema")
    def config_schema_display(self, obj: RunnerDescriptor) -> str:
        return self._json(obj.config_schema)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        refresh = path(
            "refresh/", self.admin_site.admin_view(self.refresh_view), name="runners_runnerdescriptor_refresh"
        )
        return [refresh, *super().get_urls()]

    def refresh_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            result = runner_descriptors_refresh()
        except AgentAPIException as exc:
            messages.error(request, f"Plugin runtime unavailable: {exc.error.message}")
        else:
            messages.success(
                request,
                f"Synced: {len(result.available)} available, {len(result.errored)} with load errors, "
                f"{len(result.missing)} missing.",
            )
            for runner_id in result.errored:
                messages.warning(request, f"{runner_id} failed to load; see its load error.")
            for error in result.plugin_errors:
                where = error.get("path") or error.get("plugin")
                messages.error(request, f"Plugin {where} failed to load: {error.get('error')}")
        return HttpResponseRedirect(reverse("admin:runners_runnerdescriptor_changelist"))
