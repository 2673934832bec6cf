"""Host facts about conversations: the event log, the transcript projection and host-owned state.

`EventLog` keeps every accepted event as it arrived (normalized envelope, not raw platform payloads,
which go to artifacts above a size limit). `TranscriptItem` is the conversation view runners page
through (its auto id is the cursor). `StateEntry` holds the small JSON values of the state API.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from bindings.models import Bot, Workspace


class EventLog(models.Model):
    class Status(models.TextChoices):
        ACCEPTED = "accepted", _("accepted (runs created)")
        NO_BINDING = "no_binding", _("no binding matched")
        CONFLICT = "conflict", _("binding conflict")
        # A person holds the conversation (human takeover): recorded and shown to them, no run.
        HELD = "held", _("held by a person (no run)")
        # Over the replying binding's rate limit (gateway.rate_limits): recorded, no run.
        RATE_LIMITED = "rate_limited", _("rate limited (no run)")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="events", verbose_name=_("workspace")
    )
    # Client-supplied or generated; idempotency key within the workspace.
    event_id = models.CharField(max_length=200, verbose_name=_("event id"))
    event_type = models.CharField(max_length=100, verbose_name=_("event type"))
    source = models.CharField(max_length=32, verbose_name=_("source"))
    source_event_type = models.CharField(max_length=100, blank=True, verbose_name=_("source event type"))
    event_time = models.DateTimeField(null=True, blank=True, verbose_name=_("event time"))
    bot = models.ForeignKey(
        Bot, on_delete=models.SET_NULL, null=True, blank=True, related_name="events", verbose_name=_("bot")
    )
    conversation_id = models.CharField(max_length=255, blank=True, verbose_name=_("conversation id"))
    thread_id = models.CharField(max_length=255, blank=True, verbose_name=_("thread id"))
    actor = models.JSONField(null=True, blank=True, verbose_name=_("actor"))
    subject = models.JSONField(null=True, blank=True, verbose_name=_("subject"))
    input = models.JSONField(default=dict, verbose_name=_("input"))
    input_summary = models.CharField(max_length=500, blank=True, verbose_name=_("input summary"))
    data = models.JSONField(default=dict, blank=True, verbose_name=_("data"))
    # `{"artifact_id": ..., "size": ...}` when the raw payload was too large to keep inline.
    raw_ref = models.JSONField(null=True, blank=True, verbose_name=_("raw ref"))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACCEPTED, verbose_name=_("status"))
    # A visible, machine-readable problem with routing, e.g. `{"code": "binding.conflict", ...}`.
    error = models.JSONField(null=True, blank=True, verbose_name=_("error"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name_plural = _("events")
        constraints = [models.UniqueConstraint(fields=["workspace", "event_id"], name="uniq_event_per_workspace")]
        indexes = [models.Index(fields=["workspace", "conversation_id", "id"], name="event_conversation_idx")]
        verbose_name = _("event")

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id}"


class TranscriptItem(models.Model):
    """One message in a conversation's transcript; `id` is the history cursor (monotonic, indexed)."""

    class Role(models.TextChoices):
        USER = "user", _("User")
        ASSISTANT = "assistant", _("Assistant")
        SYSTEM = "system", _("System")
        TOOL = "tool", _("Tool")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="transcript_items", verbose_name=_("workspace")
    )
    conversation_id = models.CharField(max_length=255, verbose_name=_("conversation id"))
    thread_id = models.CharField(max_length=255, blank=True, verbose_name=_("thread id"))
    role = models.CharField(max_length=16, choices=Role.choices, verbose_name=_("role"))
    content = models.TextField(blank=True, verbose_name=_("content"))
    contents = models.JSONField(default=list, blank=True, verbose_name=_("contents"))
    artifacts = models.JSONField(default=list, blank=True, verbose_name=_("artifacts"))
    event = models.ForeignKey(
        EventLog,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="transcript_items",
        verbose_name=_("event"),
    )
    # A plain id, not a foreign key: runs live in the runners app, which itself depends on this one.
    run_id = models.UUIDField(null=True, blank=True, verbose_name=_("run id"))
    runner_id = models.CharField(max_length=255, blank=True, verbose_name=_("runner id"))
    actor = models.JSONField(null=True, blank=True, verbose_name=_("actor"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("transcript item")
        verbose_name_plural = _("transcript items")
        indexes = [models.Index(fields=["workspace", "conversation_id", "id"], name="transcript_cursor_idx")]
        constraints = [
            # A redelivered or retried run can never write its reply twice.
            models.UniqueConstraint(
                fields=["run_id"], condition=Q(role="assistant"), name="uniq_assistant_item_per_run"
            ),
            models.UniqueConstraint(fields=["event"], condition=Q(role="user"), name="uniq_user_item_per_event"),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"


class StateEntry(models.Model):
    """A host-owned state value. `scope_key` is the isolated key (docs/state-storage-artifacts.md, "State"), e.g.
    `conversation:{runner}:{binding}:{conversation}[:{thread}]`."""

    class Scope(models.TextChoices):
        CONVERSATION = "conversation", _("Conversation")
        ACTOR = "actor", _("Actor")
        SUBJECT = "subject", _("Subject")
        RUNNER = "runner", _("Runner")
        BINDING = "binding", _("Binding")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="state_entries", verbose_name=_("workspace")
    )
    scope = models.CharField(max_length=16, choices=Scope.choices, verbose_name=_("scope"))
    scope_key = models.CharField(max_length=700, verbose_name=_("scope key"))
    key = models.CharField(max_length=255, verbose_name=_("key"))
    value = models.JSONField(null=True, verbose_name=_("value"))
    size_bytes = models.PositiveIntegerField(default=0, verbose_name=_("size bytes"))
    updated_by_run = models.UUIDField(null=True, blank=True, verbose_name=_("updated by run"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("state entry")
        constraints = [
            models.UniqueConstraint(fields=["workspace", "scope_key", "key"], name="uniq_state_key"),
        ]
        verbose_name_plural = _("state entries")

    def __str__(self) -> str:
        return f"{self.scope_key} {self.key}"


class StorageEntry(models.Model):
    """A value of the storage API (`api.storage`): bytes, up to 10 MiB, beside the small JSON of
    `StateEntry`. It lives here because, like state, it is a host-owned fact of a workspace that
    outlives runs; blobs larger than that belong in artifacts.

    `owner_key` isolates the areas (docs/state-storage-artifacts.md, "Storage"): `plugin:{author/name}` (private to one
    plugin, shared by its bindings), `binding:{runner}:{binding}` (private to one binding) and `workspace` (shared by
    every plugin of the workspace, which is why the binding must grant it explicitly)."""

    class Area(models.TextChoices):
        PLUGIN = "plugin", _("Plugin")
        WORKSPACE = "workspace", _("Workspace")
        BINDING = "binding", _("Binding")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="storage_entries", verbose_name=_("workspace")
    )
    area = models.CharField(max_length=16, choices=Area.choices, verbose_name=_("area"))
    owner_key = models.CharField(max_length=700, verbose_name=_("owner key"))
    key = models.CharField(max_length=512, verbose_name=_("key"))
    value = models.BinaryField(verbose_name=_("value"))
    size_bytes = models.PositiveIntegerField(default=0, verbose_name=_("size bytes"))
    updated_by_run = models.UUIDField(null=True, blank=True, verbose_name=_("updated by run"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("storage entry")
        constraints = [
            models.UniqueConstraint(fields=["workspace", "owner_key", "key"], name="uniq_storage_key"),
        ]
        verbose_name_plural = _("storage entries")

    def __str__(self) -> str:
        return f"{self.owner_key} {self.key}"


class RetentionPurge(models.Model):
    """What one retention sweep removed of one kind in one workspace (issue 22): the counts operators see in
    admin. Written by the sweep (`runners.lifecycle.retention`) through `transcripts.retention`; only
    kinds that lost something get a row. `workspace` is empty for what belongs to none (a blob outside
    every workspace's prefix)."""

    class Kind(models.TextChoices):
        ARTIFACTS = "artifacts", _("artifacts (expired or past their retention)")
        INBOUND_REFUSALS = "inbound_refusals", _("refused inbound platform requests")
        ORPHAN_BLOBS = "orphan_blobs", _("orphan blobs")
        PROXY_AUDIT = "proxy_audit", _("proxy audit rows")
        RUN_EVENTS = "run_events", _("run events of finished runs")

    sweep_started_at = models.DateTimeField(db_index=True, verbose_name=_("sweep started at"))
    workspace = models.ForeignKey(
        Workspace,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="retention_purges",
        verbose_name=_("workspace"),
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, verbose_name=_("kind"))
    count = models.PositiveIntegerField(verbose_name=_("count"))
    cutoff = models.DateTimeField(
        help_text=_("What was older than this (or expired by then) went."), verbose_name=_("cutoff")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("retention purge")
        verbose_name_plural = _("retention purges")
        ordering = ["-sweep_started_at", "kind"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.count} ({self.sweep_started_at:%Y-%m-%d %H:%M})"
