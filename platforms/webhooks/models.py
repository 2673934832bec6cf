"""Completion webhook endpoints and their delivery log (the outbox).

A `WebhookDelivery` row is written in the transaction that ends the run it reports (see
`platforms.webhooks.outbox`); the broker only wakes a sender, the row is the truth about what was sent,
when, and what the receiver answered.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from bindings.models import AgentBinding, Workspace
from foundation.crypto import EncryptedJSONField


class WebhookEventType(models.TextChoices):
    RUN_COMPLETED = "run.completed", _("Run Completed")
    RUN_FAILED = "run.failed", _("Run Failed")
    RUN_CANCELLED = "run.cancelled", _("Run Cancelled")
    # A runner's platform action waits for an operator's approval (optional: only endpoints that ask).
    ACTION_REQUESTED = "action.requested", _("Action Requested")
    # A runner asked for a human in a conversation (human takeover's inbox; optional like the above).
    HANDOFF_REQUESTED = "handoff.requested", _("Handoff Requested")
    # An alert of the workspace was raised or resolved (platforms.alerts; optional like the above).
    ALERT_RAISED = "alert.raised", _("Alert Raised")
    ALERT_RESOLVED = "alert.resolved", _("Alert Resolved")


class WebhookEndpoint(models.Model):
    """A receiver URL of one workspace (optionally of one binding only) and the run events it gets."""

    webhook_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False, verbose_name=_("webhook id"))
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="webhook_endpoints", verbose_name=_("workspace")
    )
    # Only the runs of this binding; every run of the workspace when empty.
    binding = models.ForeignKey(
        AgentBinding,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhook_endpoints",
        verbose_name=_("binding"),
    )
    url = models.URLField(max_length=2000, verbose_name=_("url"))
    description = models.CharField(max_length=200, blank=True, verbose_name=_("description"))
    event_types = models.JSONField(default=list, verbose_name=_("event types"))
    # `whsec_<base64>` (Standard Webhooks): encrypted at rest, shown once when made or rotated.
    secret = EncryptedJSONField(verbose_name=_("secret"))
    # After a rotation the old secret still signs (a second signature in the header) until it expires,
    # so receivers can switch secrets without dropping a delivery.
    previous_secret = EncryptedJSONField(null=True, blank=True, verbose_name=_("previous secret"))
    previous_secret_expires_at = models.DateTimeField(
        null=True, blank=True, verbose_name=_("previous secret expires at")
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    # Every run of the workspace up to this primary key has ended and had its messages checked
    # (`outbox.run_ends_reconcile`); set to the newest run when the endpoint is made.
    runs_checked_through = models.BigIntegerField(default=0, verbose_name=_("runs checked through"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")
        ordering = ["workspace", "id"]
        indexes = [models.Index(fields=["workspace", "enabled"], name="webhook_endpoint_ws_idx")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.url}"


class WebhookDelivery(models.Model):
    """One message to one endpoint: its signed payload, where its attempts stand and the last answer."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SUCCEEDED = "succeeded", _("Succeeded")
        FAILED = "failed", _("Failed")

    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False, verbose_name=_("delivery id"))
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="webhook_deliveries", verbose_name=_("workspace")
    )
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", verbose_name=_("endpoint")
    )
    # `webhook-id`: the same for every attempt and redelivery of one message, so receivers can de-duplicate.
    event_id = models.CharField(max_length=100, verbose_name=_("event id"))
    event_type = models.CharField(max_length=64, verbose_name=_("event type"))
    # The run the message reports (no foreign key: the log outlives a run's deletion).
    run_id = models.UUIDField(null=True, blank=True, verbose_name=_("run id"))
    payload = models.JSONField(verbose_name=_("payload"))
    # A manual redelivery is a new row pointing at the delivery it repeats.
    redelivery_of = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="redeliveries",
        verbose_name=_("redelivery of"),
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, verbose_name=_("status"))
    attempts = models.PositiveSmallIntegerField(default=0, verbose_name=_("attempts"))
    next_attempt_at = models.DateTimeField(null=True, blank=True, verbose_name=_("next attempt at"))
    # Set by the sender that claimed the delivery; its result is written only under the same token.
    claim_token = models.UUIDField(null=True, blank=True, verbose_name=_("claim token"))
    last_attempt_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last attempt at"))
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True, verbose_name=_("last status code"))
    last_response = models.CharField(max_length=1000, blank=True, verbose_name=_("last response"))
    last_error = models.CharField(max_length=500, blank=True, verbose_name=_("last error"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    delivered_at = models.DateTimeField(null=True, blank=True, verbose_name=_("delivered at"))

    class Meta:
        ordering = ["-id"]
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        indexes = [
            models.Index(fields=["endpoint", "id"], name="webhook_delivery_log_idx"),
            models.Index(fields=["run_id"], name="webhook_delivery_run_idx"),
            models.Index(fields=["next_attempt_at"], name="webhook_delivery_due_idx", condition=Q(status="pending")),
        ]
        constraints = [
            # One original message per endpoint and event: recording a run end twice records it once.
            models.UniqueConstraint(
                fields=["endpoint", "event_id"],
                condition=Q(redelivery_of__isnull=True),
                name="uniq_webhook_message_per_endpoint",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} → {self.endpoint_id} ({self.status})"
