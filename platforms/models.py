"""Facts of the chat platforms: what the host delivered to a platform for a run (and what it failed to),
and the inbound requests it refused."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from bindings.models import Bot, Workspace
from runners.models import Run


class PlatformDelivery(models.Model):
    """One run's reply on a chat platform: the messages it became, or why it could not be delivered.
    A failed delivery never changes the run's outcome; this row is where it shows."""

    class Kind(models.TextChoices):
        REPLY = "reply", _("reply")
        FILE = "file", _("file")

    class Status(models.TextChoices):
        DELIVERED = "delivered", _("delivered")
        FAILED = "failed", _("failed")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="platform_deliveries", verbose_name=_("workspace")
    )
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="platform_deliveries", verbose_name=_("run"))
    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="deliveries", verbose_name=_("bot"))
    platform = models.CharField(max_length=16, verbose_name=_("platform"))
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.REPLY, verbose_name=_("kind"))
    status = models.CharField(max_length=12, choices=Status.choices, verbose_name=_("status"))
    chat_id = models.CharField(max_length=255, blank=True, verbose_name=_("chat id"))
    message_ids = models.JSONField(default=list, blank=True, verbose_name=_("message ids"))
    calls = models.PositiveIntegerField(default=0, verbose_name=_("calls"))
    """Platform API calls made (sends, edits, uploads, retries included)."""
    error = models.JSONField(null=True, blank=True, verbose_name=_("error"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        ordering = ["-id"]
        verbose_name = _("platform delivery")
        verbose_name_plural = _("platform deliveries")
        indexes = [models.Index(fields=["run"], name="platform_delivery_run")]

    def __str__(self) -> str:
        return f"{self.platform} {self.kind} of run {self.run_id}: {self.status}"


class InboundRefusal(models.Model):
    """Inbound platform requests the host refused (forged secret or signature, replayed), counted: one row
    per bot, reason and source address in each window of `LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS`, so a
    flood of forged requests is one row with a large count (`platforms.inbound`). `message` is the first
    refusal's. The retention sweep removes rows last seen `LANGBOT_RETENTION_INBOUND_REFUSAL_DAYS` ago."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="inbound_refusals", verbose_name=_("workspace")
    )
    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="inbound_refusals", verbose_name=_("bot"))
    platform = models.CharField(max_length=16, verbose_name=_("platform"))
    reason = models.CharField(max_length=16, verbose_name=_("reason"))
    message = models.CharField(max_length=500, blank=True, verbose_name=_("message"))
    remote_addr = models.CharField(
        max_length=64,
        blank=True,
        help_text=_("The source address (an IPv6 source as its /64 network)."),
        verbose_name=_("remote addr"),
    )
    window_start = models.DateTimeField(default=timezone.now, verbose_name=_("window start"))
    count = models.PositiveIntegerField(default=1, verbose_name=_("count"))
    first_at = models.DateTimeField(default=timezone.now, verbose_name=_("first at"))
    last_at = models.DateTimeField(default=timezone.now, db_index=True, verbose_name=_("last at"))

    class Meta:
        verbose_name = _("inbound refusal")
        verbose_name_plural = _("inbound refusals")
        ordering = ["-last_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "reason", "remote_addr", "window_start"], name="inbound_refusal_per_window"
            )
        ]

    def __str__(self) -> str:
        return f"{self.platform} {self.reason} for {self.bot_id} × {self.count} from {self.first_at:%Y-%m-%d %H:%M:%S}"


class PlatformCursor(models.Model):
    """Where a bot's connection stopped reading a platform's stream, kept across restarts so that a
    reconnecting connector neither replays nor skips updates (Matrix's `since` token, WeChat Customer
    Service's `sync_msg` cursor, a gateway's resume sequence). One row per bot and cursor name."""

    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="platform_cursors", verbose_name=_("bot"))
    name = models.CharField(max_length=64, verbose_name=_("name"))
    value = models.TextField(blank=True, verbose_name=_("value"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("platform cursor")
        verbose_name_plural = _("platform cursors")
        constraints = [models.UniqueConstraint(fields=["bot", "name"], name="platform_cursor_per_bot")]

    def __str__(self) -> str:
        return f"{self.name} of {self.bot_id}"
