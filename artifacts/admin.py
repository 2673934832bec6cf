"""Admin for artifact metadata: read-only (bytes are written by the gateway and runners, never here); and each
workspace's artifact limits, an operator's decision (superusers only)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from artifacts.models import Artifact, WorkspaceArtifactSettings
from transcripts.admin import ConversationFilter, ReadOnlyWorkspaceAdmin, transcript_link


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyWorkspaceAdmin[Artifact]):
    list_display = ["artifact_id", "name", "mime_type", "size", "source", "conversation", "workspace", "created_at"]
    list_filter = ["source", ConversationFilter, "workspace"]
    search_fields = ["name", "conversation_id"]
    list_select_related = ["workspace"]
    fields = readonly_fields = (
        "artifact_id", "workspace", "name", "mime_type", "size", "sha256", "source", "conversation",
        "run_id", "event", "storage_key", "created_at", "expires_at",
    )  # fmt: skip

    @admin.display(description=_("conversation"), ordering="conversation_id")
    def conversation(self, obj: Artifact) -> SafeString:
        return transcript_link(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id)


@admin.register(WorkspaceArtifactSettings)
class WorkspaceArtifactSettingsAdmin(admin.ModelAdmin[WorkspaceArtifactSettings]):
    list_display = ["workspace", "runner_upload_max_bytes"]
    list_select_related = ["workspace"]
    autocomplete_fields = ["workspace"]

    # A workspace member must not raise their own caps: like `allow_private_addresses`, superusers only.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: WorkspaceArtifactSettings | None = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: WorkspaceArtifactSettings | None = None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: WorkspaceArtifactSettings | None = None) -> bool:
        return self.has_module_permission(request)
