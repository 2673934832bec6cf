"""`ConversationHold`: one conversation waiting for a human (`requested`), held by one (`held`), or handed
back (`released`). At most one open hold (requested or held) per conversation of a workspace."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from bindings.models import Bot, Workspace

OPEN_STATUSES = ("requested", "held")


class ConversationHold(models.Model):
    class Status(models.TextChoices):
        REQUESTED = "requested", _("waiting for a human")
        HELD = "held", _("taken over")
        RELEASED = "released", _("released")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="conversation_holds", verbose_name=_("workspace")
    )
    conversation_id = models.CharField(_("conversation"), max_length=255)
    # The bot the conversation came through (its platform delivers the operator's replies); none for the API.
    bot = models.ForeignKey(
        Bot, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("bot")
    )
    status = models.CharField(_("status"), max_length=16, choices=Status.choices)
    reason = models.CharField(_("reason"), max_length=500, blank=True)
    # A runner's handoff request: which run asked, and when (the inbox's order).
    requested_by_run = models.UUIDField(null=True, blank=True, verbose_name=_("requested by run"))
    requested_at = models.DateTimeField(_("requested at"), null=True, blank=True)
    held_by = models.CharField(_("held by"), max_length=150, blank=True)
    started_at = models.DateTimeField(_("taken over at"), null=True, blank=True)
    ended_at = models.DateTimeField(_("released at"), null=True, blank=True)
    ended_by = models.CharField(_("released by"), max_length=150, blank=True)
    # The run whose context told the runner about this hold once it was released (told once).
    reported_run_id = models.UUIDField(null=True, blank=True, verbose_name=_("reported run id"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("conversation hold")
        verbose_name_plural = _("conversation holds")
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["workspace", "conversation_id", "status"], name="takeover_conversation_idx"),
            models.Index(fields=["status", "requested_at"], name="takeover_inbox_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "conversation_id"],
                condition=Q(status__in=OPEN_STATUSES),
                name="uniq_open_hold_per_conversation",
            )
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} ({self.status})"


class WaitingConversation(ConversationHold):
    """The inbox: the admin's list of conversations whose runner asked for a human, oldest first."""

    class Meta:
        proxy = True
        verbose_name = _("conversation waiting for a human")
        verbose_name_plural = _("inbox: conversations waiting for a human")
