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
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    # A runner's platform action waits for an operator's approval (optional: only endpoints that ask).
    ACTION_REQUESTED = "action.requested"
    # A runner asked for a human in a conversation (human takeover's inbox; optional like the above).
    HANDOFF_REQUESTED = "handoff.requested"
    # An alert of the workspace was raised or resolved (platforms.alerts; optional like the above).
    ALERT_RAISED = "alert.raised"
    ALERT_RESOLVED = "alert.resolved"


class WebhookEndpoint(models.Model):
    """A receiver URL of one workspace (optionally of one binding only) and the run events it gets."""

    webhook_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhook_endpoints")
    # Only the runs of this binding; every run of the workspace when empty.
    binding = models.ForeignKey(
        AgentBinding, on_delete=models.CASCADE, null=True, blank=True, related_name="webhook_endpoints"
    )
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    event_types = models.JSONField(default=list)
    # `whsec_<base64>` (Standard Webhooks): encrypted at rest, shown once when made or rotated.
    secret = EncryptedJSONField()
    # After a rotation the old secret still signs (a second signature in the header) until it expires,
    # so receivers can switch secrets without dropping a delivery.
    previous_secret = EncryptedJSONField(null=True, blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    # Every run of the workspace up to this primary key has ended and had its messages checked
    # (`outbox.run_ends_reconcile`); set to the newest run when the endpoint is made.
    runs_checked_through = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workspace", "id"]
        indexes = [models.Index(fields=["workspace", "enabled"], name="webhook_endpoint_ws_idx")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.url}"


class WebhookDelivery(models.Model):
    """One message to one endpoint: its signed payload, where its attempts stand and the last answer."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="webhook_deliveries")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    # `webhook-id`: the same for every attempt and redelivery of one message, so receivers can de-duplicate.
    event_id = models.CharField(max_length=100)
    event_type = models.CharField(max_length=64)
    # The run the message reports (no foreign key: the log outlives a run's deletion).
    run_id = models.UUIDField(null=True, blank=True)
    payload = models.JSONField()
    # A manual redelivery is a new row pointing at the delivery it repeats.
    redelivery_of = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="redeliveries"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # Set by the sender that claimed the delivery; its result is written only under the same token.
    claim_token = models.UUIDField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_response = models.CharField(max_length=1000, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

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
