"""Admin for host facts — the event log, per-conversation transcripts and state — all read-only.

Facts are written by the gateway and the run orchestrator only; admin shows them. Staff who are not
superusers see the facts of their own workspaces. `ReadOnlyAdminMixin`, `ReadOnlyWorkspaceAdmin` and
`ConversationFilter` are shared with the runs and artifacts admin.
"""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import urlencode

from django.contrib import admin
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import ScopedListFilters
from bindings.models import Workspace
from foundation.readable import json_html
from transcripts.models import EventLog, RetentionPurge, StateEntry, TranscriptItem

ModelT = TypeVar("ModelT", bound=models.Model)


def pretty_json(value: Any) -> SafeString:
    """A JSON column as key and value lines (foundation.readable), not as JSON text."""
    return json_html(value)


def transcript_url(*, workspace_id: int, conversation_id: str) -> str:
    """The transcript admin page of one conversation (ids are per workspace, so both are in the filter)."""
    query = urlencode({"workspace__id__exact": workspace_id, "conversation_id": conversation_id})
    return f"{reverse('admin:transcripts_transcriptitem_changelist')}?{query}"


def transcript_link(*, workspace_id: int, conversation_id: str, short: bool = False) -> SafeString:
    """`short` (list columns): a long id is cut to its head, the full id in the tooltip."""
    if not conversation_id:
        return format_html("{}", "—")
    url = transcript_url(workspace_id=workspace_id, conversation_id=conversation_id)
    text = conversation_id[:20] + "…" if short and len(conversation_id) > 22 else conversation_id
    return format_html('<a href="{}" title="{}">{}</a>', url, conversation_id, text)


class ConversationFilter(admin.SimpleListFilter):
    """Filter by conversation id. The choices are the most recent conversations (a full distinct list
    would scan the table); any id works through the `conversation_id` query parameter, e.g. from links."""

    title = "conversation"
    parameter_name = "conversation_id"
    recent = 20

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        recent_ids: list[str] = []
        rows = model_admin.get_queryset(request).exclude(conversation_id="").order_by("-id")
        for conversation_id in rows.values_list("conversation_id", flat=True)[: self.recent * 10]:
            if conversation_id not in recent_ids:
                recent_ids.append(conversation_id)
            if len(recent_ids) >= self.recent:
                break
        selected = self.value()
        if selected and selected not in recent_ids:
            recent_ids.insert(0, selected)
        return [(c, c) for c in recent_ids]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(conversation_id=value) if value else queryset


class ReadOnlyAdminMixin:
    """For admins and inlines of rows only the host writes: nothing can be added, changed or deleted."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyWorkspaceAdmin(ReadOnlyAdminMixin, ScopedListFilters[ModelT]):
    """Nothing can be added, changed or deleted; non-superusers see only their workspaces' rows."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelT]:
        queryset = super().get_queryset(request)
        if getattr(request.user, "is_superuser", False):
            return queryset
        member_of = Workspace.objects.filter(memberships__user_id=request.user.pk or 0)
        return queryset.filter(workspace__in=member_of)


@admin.register(EventLog)
class EventLogAdmin(ReadOnlyWorkspaceAdmin[EventLog]):
    # Fits a laptop: ids cut to their head (full in the tooltip), the workspace as a filter only.
    list_display = ["event_short", "event_type", "source", "status", "conversation_short", "summary", "created_at"]
    list_display_links = ["event_short"]
    list_filter = ["status", "event_type", "source", "workspace"]
    search_fields = ["event_id", "conversation_id"]
    list_select_related = ["workspace"]
    date_hierarchy = "created_at"
    fields = (
        "event_id",
        "workspace",
        "event_type",
        "source",
        "source_event_type",
        "status",
        "error_display",
        "bot",
        "conversation",
        "thread_id",
        "runs_link",
        "actor_display",
        "subject_display",
        "input_summary",
        "input_display",
        "data_display",
        "raw_ref_display",
        "event_time",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description=_("conversation"), ordering="conversation_id")
    def conversation(self, obj: EventLog) -> SafeString:
        return transcript_link(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id)

    @admin.display(description=_("conversation"), ordering="conversation_id")
    def conversation_short(self, obj: EventLog) -> SafeString:
        return transcript_link(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id, short=True)

    @admin.display(description=_("event"), ordering="event_id")
    def event_short(self, obj: EventLog) -> SafeString:
        event_id = obj.event_id
        head = event_id if len(event_id) <= 18 else event_id[:16] + "…"
        return format_html('<span title="{}">{}</span>', event_id, head)

    @admin.display(description=_("input"))
    def summary(self, obj: EventLog) -> str:
        return obj.input_summary[:80]

    @admin.display(description=_("error"))
    def error_display(self, obj: EventLog) -> SafeString:
        return pretty_json(obj.error)

    @admin.display(description=_("runs"))
    def runs_link(self, obj: EventLog) -> SafeString:
        count = obj.runs.count()
        url = f"{reverse('admin:runners_run_changelist')}?{urlencode({'event__id__exact': obj.pk})}"
        return format_html('<a href="{}">{} run(s)</a>', url, count)

    @admin.display(description=_("actor"))
    def actor_display(self, obj: EventLog) -> SafeString:
        return pretty_json(obj.actor)

    @admin.display(description=_("subject"))
    def subject_display(self, obj: EventLog) -> SafeString:
        return pretty_json(obj.subject)

    @admin.display(description=_("input JSON"))
    def input_display(self, obj: EventLog) -> SafeString:
        return pretty_json(obj.input)

    @admin.display(description=_("data"))
    def data_display(self, obj: EventLog) -> SafeString:
        return pretty_json(obj.data)

    @admin.display(description=_("raw payload (artifact)"))
    def raw_ref_display(self, obj: EventLog) -> SafeString:
        return pretty_json(obj.raw_ref)


@admin.register(TranscriptItem)
class TranscriptItemAdmin(ReadOnlyWorkspaceAdmin[TranscriptItem]):
    """The per-conversation transcript: filter by a conversation (links from events and runs do) to read
    it in order."""

    list_display = ["id", "created_at", "role", "content_preview", "conversation_id", "event", "run_id", "workspace"]
    list_display_links = ["id", "content_preview"]
    list_filter = ["role", ConversationFilter, "workspace"]
    search_fields = ["conversation_id", "content"]
    list_select_related = ["workspace", "event"]
    # Oldest first: read like a chat.
    ordering = ["id"]
    list_per_page = 100
    fields = (
        "id",
        "workspace",
        "conversation_id",
        "thread_id",
        "role",
        "content",
        "contents_display",
        "artifacts_display",
        "event",
        "run_id",
        "runner_id",
        "actor_display",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description=_("content"))
    def content_preview(self, obj: TranscriptItem) -> str:
        text = obj.content or (f"[{len(obj.contents)} content part(s)]" if obj.contents else "")
        return text if len(text) <= 120 else f"{text[:119]}…"

    @admin.display(description=_("contents"))
    def contents_display(self, obj: TranscriptItem) -> SafeString:
        return pretty_json(obj.contents)

    @admin.display(description=_("artifacts"))
    def artifacts_display(self, obj: TranscriptItem) -> SafeString:
        return pretty_json(obj.artifacts)

    @admin.display(description=_("actor"))
    def actor_display(self, obj: TranscriptItem) -> SafeString:
        return pretty_json(obj.actor)


@admin.register(StateEntry)
class StateEntryAdmin(ReadOnlyWorkspaceAdmin[StateEntry]):
    list_display = ["scope_key", "key", "scope", "size_bytes", "workspace", "updated_at"]
    list_filter = ["scope", "workspace"]
    search_fields = ["scope_key", "key"]
    list_select_related = ["workspace"]
    fields = ("workspace", "scope", "scope_key", "key", "value_display", "size_bytes", "updated_by_run", "updated_at")
    readonly_fields = fields

    @admin.display(description=_("value"))
    def value_display(self, obj: StateEntry) -> SafeString:
        return pretty_json(obj.value)


@admin.register(RetentionPurge)
class RetentionPurgeAdmin(ReadOnlyWorkspaceAdmin[RetentionPurge]):
    """What the daily retention sweep removed, per kind and workspace (settings `LANGBOT_RETENTION_*`)."""

    list_display = ["sweep_started_at", "kind", "count", "workspace", "cutoff"]
    list_filter = ["kind", "workspace"]
    list_select_related = ["workspace"]
    date_hierarchy = "sweep_started_at"
    fields = readonly_fields = ("sweep_started_at", "workspace", "kind", "count", "cutoff", "created_at")
