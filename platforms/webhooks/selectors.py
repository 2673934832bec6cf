"""Reads of the completion webhooks: a workspace's endpoints and an endpoint's delivery log."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from bindings.models import Workspace
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def webhook_endpoint_list(*, workspace: Workspace) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(workspace=workspace).select_related("binding", "workspace").order_by("id")


def webhook_endpoint_get(*, workspace: Workspace, webhook_id: str) -> WebhookEndpoint | None:
    key = _uuid(webhook_id)
    if key is None:
        return None
    return webhook_endpoint_list(workspace=workspace).filter(webhook_id=key).first()


def webhook_delivery_page(
    *, endpoint: WebhookEndpoint, status: str | None, before: int | None, limit: int
) -> tuple[list[WebhookDelivery], bool]:
    """The endpoint's deliveries newest first, below the cursor `before` (a delivery's `seq`); and whether
    there are more."""
    rows = WebhookDelivery.objects.filter(endpoint=endpoint).select_related("redelivery_of")
    if status is not None:
        rows = rows.filter(status=status)
    if before is not None:
        rows = rows.filter(id__lt=before)
    page = list(rows.order_by("-id")[: limit + 1])
    return page[:limit], len(page) > limit


def webhook_delivery_get(*, endpoint: WebhookEndpoint, delivery_id: str) -> WebhookDelivery | None:
    key = _uuid(delivery_id)
    if key is None:
        return None
    return WebhookDelivery.objects.filter(endpoint=endpoint, delivery_id=key).select_related("redelivery_of").first()
