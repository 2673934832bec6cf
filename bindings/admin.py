"""Admin for workspaces and API keys. A new key's plaintext is shown once, in the success message."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from bindings.models import ApiKey, Workspace, WorkspaceMembership
from bindings.services import api_key_create


class WorkspaceMembershipInline(admin.TabularInline):
    model = WorkspaceMembership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [WorkspaceMembershipInline]
    actions = ["create_api_key"]

    @admin.action(description="Create an API key (shown once)")
    def create_api_key(self, request: HttpRequest, queryset: QuerySet[Workspace]) -> None:
        for workspace in queryset:
            _, plaintext = api_key_create(workspace=workspace, name=f"admin:{request.user}")
            messages.success(request, f"New API key for {workspace.slug} (copy it now, it is not stored): {plaintext}")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "workspace", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["workspace"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    fields = ["workspace", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Keys are minted by the workspace action or `create_api_key`, which can show the plaintext once.
        return False

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(request, f"Revoked {count} key(s).")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*self.readonly_fields, "workspace"] if obj else list(self.readonly_fields)
