"""The completion webhooks' REST API: endpoints, secret shown once and rotatable, the delivery log,
redelivery, validation errors and workspace isolation."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from standardwebhooks.webhooks import Webhook

from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from runners.lifecycle.services import run_cancel_request
from tests.factories import AgentBindingFactory, WorkspaceFactory
from tests.platforms.webhooks.conftest import make_run, send_due

pytestmark = pytest.mark.django_db

MASK = "********"


def _create(client, **body):
    body.setdefault("url", "https://example.invalid/hooks")
    body.setdefault("event_types", ["run.completed", "run.failed"])
    return client.post("/api/v1/webhooks", body, format="json")


def test_the_secret_is_shown_when_the_endpoint_is_made_and_masked_afterwards(api_client):
    # when an endpoint is created
    created = _create(api_client)
    # then the answer carries its whsec_ secret once; reads show it masked
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["secret"].startswith("whsec_")
    assert body["event_types"] == ["run.completed", "run.failed"]
    read = api_client.get(f"/api/v1/webhooks/{body['webhook_id']}").json()
    assert read["secret"] == MASK
    listed = api_client.get("/api/v1/webhooks").json()["items"]
    assert [item["secret"] for item in listed] == [MASK]
    # and it is stored encrypted
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM webhooks_webhookendpoint")
        [(stored,)] = cursor.fetchall()
    assert body["secret"].removeprefix("whsec_") not in stored
    assert WebhookEndpoint.objects.get().secret == body["secret"]


def test_an_endpoint_can_be_limited_to_a_binding_changed_and_deleted(api_client, workspace):
    # given a binding of the workspace and an endpoint
    binding = AgentBindingFactory.create(workspace=workspace)
    webhook_id = _create(api_client).json()["webhook_id"]
    # when it is limited to the binding and disabled, then deleted
    patched = api_client.patch(
        f"/api/v1/webhooks/{webhook_id}", {"binding_id": binding.binding_id, "enabled": False}, format="json"
    )
    deleted = api_client.delete(f"/api/v1/webhooks/{webhook_id}")
    # then the change showed, and the endpoint is gone
    assert patched.status_code == 200
    assert patched.json()["binding_id"] == binding.binding_id
    assert patched.json()["enabled"] is False
    assert deleted.status_code == 204
    assert api_client.get(f"/api/v1/webhooks/{webhook_id}").status_code == 404


def test_rotation_answers_the_new_secret_once_and_messages_verify_with_it(api_client, workspace, receiver):
    # given an endpoint at the receiver
    created = _create(api_client, url=receiver.url, event_types=["run.cancelled"]).json()
    # when its secret is rotated without a grace period
    rotated = api_client.post(
        f"/api/v1/webhooks/{created['webhook_id']}/rotate-secret", {"grace_seconds": 0}, format="json"
    )
    run_cancel_request(run=make_run(workspace), reason="stop")
    send_due(WebhookEndpoint.objects.get())
    # then the new secret differs, is shown once, and signs the messages alone
    assert rotated.status_code == 200
    new_secret = rotated.json()["secret"]
    assert new_secret.startswith("whsec_")
    assert new_secret != created["secret"]
    assert api_client.get(f"/api/v1/webhooks/{created['webhook_id']}").json()["secret"] == MASK
    [request] = receiver.requests
    assert Webhook(new_secret).verify(request["body"], request["headers"])["type"] == "run.cancelled"
    assert len(request["headers"]["webhook-signature"].split(" ")) == 1


def test_the_delivery_log_shows_attempts_and_a_redelivery_sends_the_same_message_again(api_client, workspace, receiver):
    # given a message that the receiver refused once, then accepted
    receiver.script.append(500)
    webhook_id = _create(api_client, url=receiver.url, event_types=["run.cancelled"]).json()["webhook_id"]
    endpoint = WebhookEndpoint.objects.get()
    run_cancel_request(run=make_run(workspace), reason="stop")
    [first] = send_due(endpoint)
    log = api_client.get(f"/api/v1/webhooks/{webhook_id}/deliveries").json()
    # when it is redelivered by hand
    redelivered = api_client.post(
        f"/api/v1/webhooks/{webhook_id}/deliveries/{first.delivery_id}/redeliver", format="json"
    )
    send_due(endpoint)
    # then the log showed the failed attempt, and the receiver got the message again with the same webhook-id
    [entry] = log["items"]
    assert entry["status"] == "pending"
    assert entry["attempts"] == 1
    assert entry["last_status_code"] == 500
    assert entry["last_response"] == "answered 500"
    assert entry["payload"]["type"] == "run.cancelled"
    assert redelivered.status_code == 202
    assert redelivered.json()["redelivery_of"] == str(first.delivery_id)
    assert [r["status"] for r in receiver.requests] == [500, 204]
    assert len({r["headers"]["webhook-id"] for r in receiver.requests}) == 1
    statuses = api_client.get(f"/api/v1/webhooks/{webhook_id}/deliveries?status=succeeded").json()["items"]
    assert [s["delivery_id"] for s in statuses] == [redelivered.json()["delivery_id"]]


def test_the_delivery_log_pages_newest_first(api_client, workspace):
    webhook_id = _create(api_client, event_types=["run.cancelled"]).json()["webhook_id"]
    for _ in range(3):
        run_cancel_request(run=make_run(workspace), reason="stop")
    first = api_client.get(f"/api/v1/webhooks/{webhook_id}/deliveries?limit=2").json()
    second = api_client.get(
        f"/api/v1/webhooks/{webhook_id}/deliveries?limit=2&before={first['items'][-1]['seq']}"
    ).json()
    assert first["has_more"] is True
    assert second["has_more"] is False
    seqs = [i["seq"] for i in first["items"] + second["items"]]
    assert seqs == sorted(seqs, reverse=True)
    assert len(set(seqs)) == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.invalid/x"}, "url"),
        ({"url": "https://user:pw@example.invalid/x"}, "url"),
        ({"event_types": ["run.exploded"]}, "event_types.0"),
        ({"event_types": []}, "event_types"),
        ({"secret": "not-a-secret"}, "secret"),
        ({"secret": "whsec_c2hvcnQ="}, "secret"),
        ({"binding_id": "no-such-binding"}, "binding_id"),
        ({"colour": "blue"}, "colour"),
        ({"enabled": "yes"}, "enabled"),
    ],
)
def test_a_bad_endpoint_is_refused_with_400_naming_the_field(api_client, body, field):
    answer = _create(api_client, **body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_argument"
    assert field in error["details"]["fields"]


def test_bad_query_and_rotation_input_are_refused_with_400(api_client):
    webhook_id = _create(api_client).json()["webhook_id"]
    bad_status = api_client.get(f"/api/v1/webhooks/{webhook_id}/deliveries?status=lost")
    bad_limit = api_client.get(f"/api/v1/webhooks/{webhook_id}/deliveries?limit=1000")
    bad_grace = api_client.post(f"/api/v1/webhooks/{webhook_id}/rotate-secret", {"grace_seconds": -1}, format="json")
    for answer, field in ((bad_status, "status"), (bad_limit, "limit"), (bad_grace, "grace_seconds")):
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "invalid_argument"
        assert field in answer.json()["error"]["details"]["fields"]


def test_another_workspace_sees_none_of_the_endpoints_or_deliveries(api_client, api_client_for, workspace):
    # given an endpoint with a delivery in this workspace
    webhook_id = _create(api_client, event_types=["run.cancelled"]).json()["webhook_id"]
    run_cancel_request(run=make_run(workspace), reason="stop")
    delivery = WebhookDelivery.objects.get()
    other = api_client_for(WorkspaceFactory.create())
    base = f"/api/v1/webhooks/{webhook_id}"
    # when another workspace's key asks for them, then each answer is 404 and the list is empty
    assert other.get("/api/v1/webhooks").json()["items"] == []
    answers = [
        other.get(base),
        other.patch(base, {"enabled": False}, format="json"),
        other.post(f"{base}/rotate-secret", {}, format="json"),
        other.get(f"{base}/deliveries"),
        other.post(f"{base}/deliveries/{delivery.delivery_id}/redeliver", format="json"),
        other.delete(base),
        api_client.get("/api/v1/webhooks/not-a-uuid"),
    ]
    assert [a.status_code for a in answers] == [404] * len(answers)
    assert all(a.json()["error"]["code"] == "not_found" for a in answers)
    assert WebhookEndpoint.objects.get().enabled is True


def test_no_secret_appears_in_any_log(api_client, workspace, receiver, caplog):
    # given every log record captured
    caplog.set_level(logging.DEBUG)
    # when an endpoint is made, rotated, and a message is delivered and redelivered
    created = _create(api_client, url=receiver.url, event_types=["run.cancelled"]).json()
    rotated = api_client.post(f"/api/v1/webhooks/{created['webhook_id']}/rotate-secret", {}, format="json").json()
    run_cancel_request(run=make_run(workspace), reason="stop")
    [delivery] = send_due(WebhookEndpoint.objects.get())
    api_client.post(f"/api/v1/webhooks/{created['webhook_id']}/deliveries/{delivery.delivery_id}/redeliver")
    send_due(WebhookEndpoint.objects.get())
    # then neither secret (nor its key part) was logged
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert len(receiver.requests) == 2
    for secret in (created["secret"], rotated["secret"]):
        assert secret not in text
        assert secret.removeprefix("whsec_") not in text


def test_redelivering_to_a_disabled_webhook_is_refused_with_409(api_client, workspace):
    # given a delivery of an endpoint that was disabled since
    webhook_id = _create(api_client, event_types=["run.cancelled"]).json()["webhook_id"]
    run_cancel_request(run=make_run(workspace), reason="stop")
    delivery = WebhookDelivery.objects.get()
    api_client.patch(f"/api/v1/webhooks/{webhook_id}", {"enabled": False}, format="json")
    # when it is redelivered
    answer = api_client.post(f"/api/v1/webhooks/{webhook_id}/deliveries/{delivery.delivery_id}/redeliver")
    # then the refusal says why, and nothing is queued
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "failed_precondition"
    assert WebhookDelivery.objects.count() == 1
