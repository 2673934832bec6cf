"""Alerts and the thresholds that raise them, per workspace.

An `Alert` row is the truth about a condition: open (`raised`) while it holds, `resolved` once it stopped.
At most one alert of a (workspace, kind, subject) is open at a time — a partial unique constraint, so two
evaluators running at once (or one re-run after a crash) raise it once: the second insert fails and sends
nothing. Resolving is a conditional update from `raised`, so it is done (and announced) once too.
"""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from bindings.models import Workspace


class AlertKind(models.TextChoices):
    BOT_CONNECTION = "bot.connection", _("bot connection down")
    BOT_DELIVERIES = "bot.deliveries", _("bot deliveries failing")
    BINDING_FAILURES = "binding.failure_rate", _("binding failure rate")
    QUEUE_WAIT = "queue.wait", _("queue waiting")
    PROVIDER_ERRORS = "provider.errors", _("model provider errors")


class Alert(models.Model):
    """One raised condition of a workspace and, once it stopped, when."""

    class State(models.TextChoices):
        RAISED = "raised", _("raised")
        RESOLVED = "resolved", _("resolved")

    alert_id = models.UUIDField(_("alert id"), default=uuid.uuid4, unique=True, editable=False)
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="alerts", verbose_name=_("workspace")
    )
    kind = models.CharField(_("kind"), max_length=32, choices=AlertKind.choices)
    # What it is about, by its public id: a bot's or binding's id, a provider's id, or `queue`.
    subject = models.CharField(_("subject"), max_length=200)
    state = models.CharField(_("state"), max_length=12, choices=State.choices, default=State.RAISED)
    raised_at = models.DateTimeField(_("raised at"))
    resolved_at = models.DateTimeField(_("resolved at"), null=True, blank=True)
    # The figures that raised it (counts, thresholds, the last error): shown and sent, never a secret.
    details = models.JSONField(_("details"), default=dict, blank=True)

    class Meta:
        ordering = ["-raised_at", "-id"]
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        indexes = [models.Index(fields=["workspace", "state"], name="alert_ws_state_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "kind", "subject"],
                condition=Q(state="raised"),
                name="uniq_open_alert_per_subject",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject} ({self.state})"


class AlertSettings(models.Model):
    """A workspace's thresholds; a workspace without a row uses the defaults below."""

    workspace = models.OneToOneField(
        Workspace, on_delete=models.CASCADE, related_name="alert_settings", verbose_name=_("workspace")
    )
    enabled = models.BooleanField(
        _("enabled"), default=True, help_text=_("Off: no alert is raised, open ones are resolved.")
    )
    binding_runs = models.PositiveIntegerField(
        _("binding runs counted"),
        default=10,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text=_("A binding's failure rate is read over its last this many ended runs (cancelled left out)."),
    )
    binding_failure_rate = models.FloatField(
        _("binding failure rate"),
        default=0.5,
        validators=[MinValueValidator(0.01), MaxValueValidator(1.0)],
        help_text=_("Raised when at least this share (0.01 to 1) of those runs failed or timed out."),
    )
    queue_wait_seconds = models.PositiveIntegerField(
        _("queue wait (seconds)"),
        default=300,
        validators=[MinValueValidator(1)],
        help_text=_("Raised when a run waits queued this long."),
    )
    delivery_failures = models.PositiveIntegerField(
        _("failed deliveries"),
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text=_("Raised when a bot's last this many platform deliveries all failed."),
    )
    provider_errors = models.PositiveIntegerField(
        _("provider errors"),
        default=5,
        validators=[MinValueValidator(1)],
        help_text=_("Raised when a model provider's calls fail this many times within the window."),
    )
    provider_window_seconds = models.PositiveIntegerField(
        _("provider window (seconds)"),
        default=600,
        validators=[MinValueValidator(60)],
        help_text=_("The window of the provider errors."),
    )

    class Meta:
        verbose_name = _("alert thresholds")
        verbose_name_plural = _("alert thresholds")

    def __str__(self) -> str:
        return f"{self.workspace}"
