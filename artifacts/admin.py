"""Admin for artifact metadata: read-only (bytes are written by the gateway and runners, never here)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from artifacts.models import Artifact
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
    )

    @admin.display(description="conversation", ordering="conversation_id")
    def conversation(self, obj: Artifact) -> SafeString:
        return transcript_link(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id)
