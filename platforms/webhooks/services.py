"""Writes of the completion webhooks: endpoints (create, update, delete, rotate their secret) and manual
redelivery. Recording run ends is `outbox`, sending is `delivery`.

A URL must pass the outbound address guard (`foundation.outbound`) when it is set: public addresses
only, unless the operator allowed private ones for the workspace or the host (400 `address.not_allowed`).
A secret is generated here (or taken from the caller), stored encrypted, returned once to whoever made or
rotated it and never logged.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from bindings.models import AgentBinding, Workspace
from bindings.selectors import workspace_private_addresses_allowed
from foundation.api_errors import FieldsRefusedError
from foundation.outbound import url_checked
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from platforms.webhooks.outbox import deliveries_send_on_commit, runs_mark, subscribed_workspaces_forget
from platforms.webhooks.signing import secret_generate
from platforms.webhooks.specs import WebhookEndpointIn, WebhookEndpointPatchIn

logger = logging.getLogger(__name__)


def _binding_of(workspace: Workspace, binding_id: str | None) -> AgentBinding | None:
    if binding_id is None:
        return None
    binding = AgentBinding.objects.filter(workspace=workspace, binding_id=binding_id).first()
    if binding is None:
        raise FieldsRefusedError({"binding_id": f"No binding {binding_id!r} in this workspace."})
    return binding


def _url_allowed(workspace: Workspace, url: str) -> str:
    return url_checked(url, allow_private=workspace_private_addresses_allowed(workspace=workspace))


def webhook_endpoint_create(*, workspace: Workspace, spec: WebhookEndpointIn) -> tuple[WebhookEndpoint, str]:
    """Create an endpoint; returns it and its secret in plain text (the only time it is shown)."""
    secret = spec.secret or secret_generate()
    endpoint = WebhookEndpoint.objects.create(
        workspace=workspace,
        binding=_binding_of(workspace, spec.binding_id),
        url=_url_allowed(workspace, spec.url),
        description=spec.description,
        event_types=list(spec.event_types),
        secret=secret,
        enabled=spec.enabled,
        runs_checked_through=runs_mark(),
    )
    transaction.on_commit(subscribed_workspaces_forget)
    logger.info("webhook endpoint %s created in workspace %s", endpoint.webhook_id, workspace.slug)
    return endpoint, secret


def webhook_endpoint_update(*, endpoint: WebhookEndpoint, patch: WebhookEndpointPatchIn) -> WebhookEndpoint:
    given = patch.model_fields_set
    if "url" in given and patch.url is not None:
        _url_allowed(endpoint.workspace, patch.url)
    if "binding_id" in given:
        endpoint.binding = _binding_of(endpoint.workspace, patch.binding_id)
    for name in ("url", "event_types", "description", "enabled"):
        value = getattr(patch, name)
        if name in given and value is not None:
            setattr(endpoint, name, list(value) if name == "event_types" else value)
    endpoint.save()
    transaction.on_commit(subscribed_workspaces_forget)
    return endpoint


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    """Delete the endpoint with its delivery log; pending deliveries are not sent."""
    endpoint.delete()
    transaction.on_commit(subscribed_workspaces_forget)


def webhook_secret_rotate(
    *, endpoint: WebhookEndpoint, grace_seconds: int, secret: str | None = None
) -> tuple[WebhookEndpoint, str]:
    """Give the endpoint a new secret; the old one keeps signing beside it for `grace_seconds`. Returns
    the endpoint and the new secret in plain text (the only time it is shown)."""
    new_secret = secret or secret_generate()
    now = timezone.now()
    if grace_seconds > 0:
        endpoint.previous_secret = endpoint.secret
        endpoint.previous_secret_expires_at = now + timedelta(seconds=grace_seconds)
    else:
        endpoint.previous_secret = None
        endpoint.previous_secret_expires_at = None
    endpoint.secret = new_secret
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at", "updated_at"])
    logger.info("webhook endpoint %s: secret rotated (previous valid %d s)", endpoint.webhook_id, grace_seconds)
    return endpoint, new_secret


def webhook_delivery_redeliver(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery's message again, whatever became of it, as a new delivery with the same
    `webhook-id` (receivers de-duplicate on it) and a fresh retry schedule."""
    repeated = WebhookDelivery.objects.create(
        workspace_id=delivery.workspace_id,
        endpoint_id=delivery.endpoint_id,
        event_id=delivery.event_id,
        event_type=delivery.event_type,
        run_id=delivery.run_id,
        payload=delivery.payload,
        redelivery_of=delivery.redelivery_of or delivery,
        next_attempt_at=timezone.now(),
    )
    deliveries_send_on_commit(delivery_ids=[str(repeated.delivery_id)])
    return repeated
