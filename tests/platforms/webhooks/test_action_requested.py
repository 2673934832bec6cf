"""`action.requested`: an endpoint that subscribed to it gets a signed message when a runner's platform
action starts waiting for approval — recorded with the request, telling what to approve, until when and
where — and endpoints that did not subscribe get nothing."""

from __future__ import annotations

import json

import pytest
from standardwebhooks.webhooks import Webhook

from platforms.webhooks import outbox
from platforms.webhooks.models import WebhookDelivery
from runners.actions.platform_actions import platform_action_submit
from runners.models import PlatformActionRequest
from tests.factories import AgentBindingFactory, WebhookEndpointFactory
from tests.platforms.webhooks.conftest import make_run, send_due

pytestmark = pytest.mark.django_db

NEEDS_APPROVAL = {"actions": ["message.send", "message.delete"], "require_action_approval": True}
NO_APPROVAL = {"actions": ["message.delete"], "require_action_approval": False}


def _request(run, *, capabilities=NEEDS_APPROVAL, action: str = "message.send") -> PlatformActionRequest:
    return platform_action_submit(
        run=run, capabilities=capabilities, action=action, target={"conversation_id": "conv-1"},
        payload={"text": "pay the invoice"}, origin=PlatformActionRequest.Origin.PROXY,
    )  # fmt: skip


def test_a_subscribed_endpoint_gets_a_signed_message_saying_what_to_approve_and_how(workspace, receiver, api_client):
    # given an endpoint at the receiver subscribed to action.requested
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url, event_types=["action.requested"])
    run = make_run(workspace)
    # when the runner asks for an action that needs approval, and the sender runs
    request = _request(run)
    [delivery] = send_due(endpoint)
    # then the receiver got one message, verifiable with the endpoint's secret
    assert request.status == PlatformActionRequest.Status.PENDING
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    [received] = receiver.requests
    headers = received["headers"]
    Webhook(endpoint.secret).verify(received["body"], headers)
    assert headers["webhook-id"] == f"msg_action_{request.pk}"
    message = json.loads(received["body"])
    data = message["data"]
    assert message["type"] == "action.requested"
    assert data["request_id"] == request.pk
    assert data["run_id"] == str(run.run_id)
    assert data["action"] == "message.send"
    assert data["target"] == {"conversation_id": "conv-1"}
    assert request.expires_at is not None
    assert data["expires_at"].startswith(request.expires_at.isoformat()[:19])
    assert data["approve"] == {"method": "POST", "path": f"/api/v1/actions/{request.pk}/approve"}
    assert data["reject"] == {"method": "POST", "path": f"/api/v1/actions/{request.pk}/reject"}
    # the action's payload (a message's text) stays out of the message; the detail path shows it
    assert b"pay the invoice" not in received["body"]
    assert api_client.get(data["detail"]["path"]).json()["payload"] == {"text": "pay the invoice"}
    # and the reject path given decides the request
    rejected = api_client.post(data["reject"]["path"])
    assert rejected.status_code == 200
    assert rejected.json()["status"] == "rejected"


def test_endpoints_not_subscribed_or_of_another_binding_get_nothing(workspace):
    # given an endpoint of run ends only, and one of action.requested for another binding's runs
    WebhookEndpointFactory.create(workspace=workspace)
    other = AgentBindingFactory.create(workspace=workspace)
    WebhookEndpointFactory.create(workspace=workspace, event_types=["action.requested"], binding=other)
    # when a run of a third binding asks for an action needing approval
    _request(make_run(workspace))
    # then no message is recorded
    assert not WebhookDelivery.objects.exists()


def test_an_endpoint_of_the_runs_binding_gets_it_and_actions_that_need_no_approval_send_nothing(workspace):
    # given an endpoint of action.requested limited to the run's binding
    run = make_run(workspace)
    endpoint = WebhookEndpointFactory.create(
        workspace=workspace, event_types=["action.requested", "run.completed"], binding=run.binding
    )
    # when one action executes at once (no approval needed) and another waits for approval
    executed = _request(run, capabilities=NO_APPROVAL, action="message.delete")
    pending = _request(run)
    # then only the waiting one is announced, once
    assert executed.status != PlatformActionRequest.Status.PENDING
    assert list(WebhookDelivery.objects.values_list("endpoint_id", "event_type", "event_id")) == [
        (endpoint.pk, "action.requested", f"msg_action_{pending.pk}")
    ]


def test_the_api_accepts_action_requested_among_the_event_types(api_client):
    created = api_client.post(
        "/api/v1/webhooks",
        {"url": "https://example.invalid/hooks", "event_types": ["action.requested", "run.failed"]},
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["event_types"] == ["action.requested", "run.failed"]
    bad = api_client.post(
        "/api/v1/webhooks", {"url": "https://example.invalid/hooks", "event_types": ["action.approved"]}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_argument"


def test_a_failing_webhook_record_never_loses_the_request(workspace, monkeypatch):
    # given an endpoint, and a webhook record that breaks
    WebhookEndpointFactory.create(workspace=workspace, event_types=["action.requested"])

    def broken(**kwargs):
        raise RuntimeError("outbox down")

    monkeypatch.setattr(outbox, "action_deliveries_record", broken)
    # when an action needing approval is requested
    request = _request(make_run(workspace))
    # then the request still waits for its operator
    assert PlatformActionRequest.objects.get(pk=request.pk).status == PlatformActionRequest.Status.PENDING
    assert not WebhookDelivery.objects.exists()
