"""The completion webhooks in admin: the secret shown once when an endpoint is made, the delivery log and
its redeliver action."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from runners.lifecycle.services import run_cancel_request
from tests.factories import WebhookEndpointFactory
from tests.platforms.webhooks.conftest import make_run

pytestmark = pytest.mark.django_db


def test_an_endpoint_made_in_admin_shows_its_secret_once(admin_client, workspace):
    # when an operator adds an endpoint
    answer = admin_client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {"workspace": workspace.pk, "url": "https://example.invalid/hook", "event_types": ["run.completed"],
         "enabled": "on"},
        follow=True,
    )  # fmt: skip
    # then the message after saving shows the secret, and the endpoint's page does not
    endpoint = WebhookEndpoint.objects.get()
    shown = " ".join(str(m) for m in get_messages(answer.wsgi_request))
    assert endpoint.secret in shown
    page = admin_client.get(f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/").content.decode()
    assert endpoint.secret not in page
    assert endpoint.secret.removeprefix("whsec_") not in page


def test_the_delivery_log_lists_deliveries_and_redelivers_them(admin_client, workspace):
    # given a recorded delivery
    WebhookEndpointFactory.create(workspace=workspace)
    run_cancel_request(run=make_run(workspace), reason="stop")
    delivery = WebhookDelivery.objects.get()
    # when an operator opens the log and redelivers it
    log = admin_client.get("/admin/webhooks/webhookdelivery/").content.decode()
    admin_client.post(
        "/admin/webhooks/webhookdelivery/", {"action": "redeliver", "_selected_action": [delivery.pk]}, follow=True
    )
    # then the log showed it, and a redelivery of the same message is queued
    assert delivery.event_id in log
    repeated = WebhookDelivery.objects.exclude(pk=delivery.pk).get()
    assert repeated.redelivery_of == delivery
    assert repeated.event_id == delivery.event_id
    assert repeated.status == WebhookDelivery.Status.PENDING


def test_admin_refuses_an_endpoint_at_a_private_address_unless_allowed(admin_client, workspace, settings):
    # given private addresses not allowed (production's default)
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False
    # when an operator adds an endpoint at the cloud metadata address
    answer = admin_client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {"workspace": workspace.pk, "url": "http://169.254.169.254/latest", "event_types": ["action.requested"],
         "enabled": "on"},
    )  # fmt: skip
    # then the form says why, and nothing was saved
    assert answer.status_code == 200
    assert "link-local" in answer.content.decode()
    assert not WebhookEndpoint.objects.exists()
