"""Admin of the alerts: the list of raised and resolved alerts (read-only: the evaluator owns them) and each
workspace's thresholds."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from bindings.admin_scope import WorkspaceScopedAdmin
from platforms.alerts.models import Alert, AlertSettings


@admin.register(Alert)
class AlertAdmin(WorkspaceScopedAdmin[Alert]):
    list_display = ["kind", "subject", "workspace", "state", "raised_at", "resolved_at"]
    list_filter = ["state", "kind", "workspace"]
    search_fields = ["subject"]
    readonly_fields = ["alert_id", "workspace", "kind", "subject", "state", "raised_at", "resolved_at", "details"]
    date_hierarchy = "raised_at"

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AlertSettings)
class AlertSettingsAdmin(WorkspaceScopedAdmin[AlertSettings]):
    list_display = [
        "workspace", "enabled", "binding_runs", "binding_failure_rate", "queue_wait_seconds", "delivery_failures",
        "provider_errors", "provider_window_seconds",
    ]  # fmt: skip
