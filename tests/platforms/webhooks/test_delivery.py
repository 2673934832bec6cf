"""Completion webhooks end to end in one process: a run ends, its message is recorded with the run end,
the sender signs and POSTs it to a local receiver, and failures are retried on the Standard Webhooks
schedule for 24 hours (the clock advanced by hand)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from platforms.webhooks import delivery as delivery_module
from platforms.webhooks.delivery import deliveries_due
from platforms.webhooks.models import WebhookDelivery
from platforms.webhooks.services import webhook_secret_rotate
from runners.lifecycle.services import run_cancel_request
from tests.factories import WebhookEndpointFactory
from tests.host.test_metrics import process_samples
from tests.platforms.webhooks.conftest import make_run, send_due

pytestmark = pytest.mark.django_db


def test_a_cancelled_run_reaches_the_receiver_signed_per_standard_webhooks(workspace, receiver):
    # given an endpoint subscribed to run.cancelled and a queued run
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url, event_types=["run.cancelled"])
    run = make_run(workspace)
    # when the run is cancelled and the sender runs
    run_cancel_request(run=run, reason="user asked")
    [delivery] = send_due(endpoint)
    # then the receiver got one POST that the Standard Webhooks library verifies with the endpoint's secret
    [request] = receiver.requests
    payload = Webhook(endpoint.secret).verify(request["body"], request["headers"])
    assert payload["type"] == "run.cancelled"
    assert payload["data"]["run_id"] == str(run.run_id)
    assert payload["data"]["status"] == "cancelled"
    assert payload["data"]["status_reason"] == "user asked"
    assert payload["data"]["event_id"] == run.event.event_id
    assert request["headers"]["webhook-id"] == f"msg_{run.run_id.hex}"
    assert request["headers"]["content-type"] == "application/json"
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    assert delivery.last_status_code == 204


def test_a_forged_message_fails_verification_on_the_receiving_side(workspace, receiver):
    # given a delivered message
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    run_cancel_request(run=make_run(workspace), reason="stop")
    send_due(endpoint)
    [request] = receiver.requests
    # when its body is altered, or it is checked with another secret
    tampered = request["body"].replace(b"stop", b"STOP")
    # then the library refuses both
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoint.secret).verify(tampered, request["headers"])
    with pytest.raises(WebhookVerificationError):
        Webhook(WebhookEndpointFactory.build().secret).verify(request["body"], request["headers"])


def test_a_receiver_failing_three_times_then_accepting_gets_exactly_one_accepted_delivery(workspace, receiver):
    # given a receiver that answers 500, 503, 500 and then 204
    receiver.script.extend([500, 503, 500])
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    run_cancel_request(run=make_run(workspace), reason="stop")
    before = process_samples()
    # when the sender runs whenever the delivery is due (and once more a day later)
    now = timezone.now()
    for _ in range(4):
        [delivery] = send_due(endpoint, now=now)
        now = delivery.next_attempt_at or now
    assert send_due(endpoint, now=now + timedelta(days=1)) == []
    # then the message was accepted exactly once, after four attempts with the same webhook-id
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    assert delivery.attempts == 4
    assert [r["status"] for r in receiver.requests] == [500, 503, 500, 204]
    assert len(receiver.accepted()) == 1
    assert {r["headers"]["webhook-id"] for r in receiver.requests} == {delivery.event_id}
    # and the metrics count three attempts that will be retried and one accepted
    after = process_samples()
    for outcome, attempts in (("retrying", 3), ("accepted", 1)):
        key = ("langbot_webhook_attempts_total", (("outcome", outcome),))
        assert after.get(key, 0) - before.get(key, 0) == attempts


def test_a_failed_attempt_is_retried_only_when_its_backoff_has_passed(workspace, receiver):
    # given a delivery whose first attempt failed
    receiver.script.extend([500, 500])
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    run_cancel_request(run=make_run(workspace), reason="stop")
    start = timezone.now()
    send_due(endpoint, now=start)
    # when the sender runs again 4 s later, then 5 s later, then 2 minutes after that
    early = send_due(endpoint, now=start + timedelta(seconds=4))
    second = send_due(endpoint, now=start + timedelta(seconds=5))
    too_soon = send_due(endpoint, now=start + timedelta(seconds=5, minutes=2))
    # then only the attempt at 5 s happened; the next waits 5 minutes after it
    assert early == []
    assert too_soon == []
    [delivery] = second
    assert delivery.attempts == 2
    assert delivery.next_attempt_at == start + timedelta(seconds=5, minutes=5)
    assert len(receiver.requests) == 2


def test_a_receiver_that_never_accepts_is_given_up_after_24_hours(workspace, receiver):
    # given a receiver that always fails
    receiver.script.extend([500] * 20)
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    run_cancel_request(run=make_run(workspace), reason="stop")
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    # when the sender runs at every due time
    now = timezone.now()
    while True:
        attempted = send_due(endpoint, now=now)
        if not attempted or attempted[0].next_attempt_at is None:
            break
        now = attempted[0].next_attempt_at
    # then it tried on the spec's schedule, last at 24 h after the message was recorded, and then failed
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.FAILED
    assert delivery.attempts == 8
    assert now == delivery.created_at + timedelta(hours=24)
    assert delivery.last_status_code == 500
    assert delivery.last_response == "answered 500"


def test_an_unreachable_receiver_is_recorded_and_retried(workspace, receiver):
    # given an endpoint at a port nothing listens on
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url="http://127.0.0.1:9/hooks")
    run_cancel_request(run=make_run(workspace), reason="stop")
    # when the sender runs
    [delivery] = send_due(endpoint)
    # then the failure is recorded and a retry scheduled
    assert delivery.status == WebhookDelivery.Status.PENDING
    assert delivery.last_status_code is None
    assert "Connect" in delivery.last_error
    assert delivery.next_attempt_at is not None


def test_after_a_rotation_both_secrets_verify_during_the_grace_period_and_only_the_new_one_after(workspace, receiver):
    # given an endpoint whose secret was rotated with a one-hour grace period
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    old_secret = endpoint.secret
    endpoint, new_secret = webhook_secret_rotate(endpoint=endpoint, grace_seconds=3600)
    # when a message is sent within the hour, and another after it
    run_cancel_request(run=make_run(workspace), reason="one")
    send_due(endpoint)
    run_cancel_request(run=make_run(workspace), reason="two")
    send_due(endpoint, now=timezone.now() + timedelta(hours=2))
    # then the first verifies with either secret, the second only with the new one
    first, second = receiver.requests
    assert len(first["headers"]["webhook-signature"].split(" ")) == 2
    Webhook(old_secret).verify(first["body"], first["headers"])
    Webhook(new_secret).verify(first["body"], first["headers"])
    Webhook(new_secret).verify(second["body"], second["headers"])
    with pytest.raises(WebhookVerificationError):
        Webhook(old_secret).verify(second["body"], second["headers"])


def test_a_disabled_endpoint_gets_nothing(workspace, receiver):
    # given a disabled endpoint
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url, enabled=False)
    # when a run ends
    run_cancel_request(run=make_run(workspace), reason="stop")
    # then no message is recorded or sent
    assert not WebhookDelivery.objects.filter(endpoint=endpoint).exists()
    assert send_due(endpoint) == []
    assert receiver.requests == []


def test_the_due_sweep_resends_retries_and_first_messages_whose_sender_was_never_woken(workspace, receiver):
    # given a delivery whose first attempt failed, and a fresh one whose wake-up message was lost
    receiver.script.append(500)
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    run_cancel_request(run=make_run(workspace), reason="one")
    start = timezone.now()
    [retried] = send_due(endpoint, now=start)
    run_cancel_request(run=make_run(workspace), reason="two")
    fresh = WebhookDelivery.objects.exclude(pk=retried.pk).get()
    # when the beat's sweep looks 10 s, then a minute later
    soon = deliveries_due(now=start + timedelta(seconds=10))
    later = deliveries_due(now=start + timedelta(minutes=1))
    # then the retry is due at once, the fresh message only after its grace (its sender may be busy)
    assert soon == [str(retried.delivery_id)]
    assert set(later) == {str(retried.delivery_id), str(fresh.delivery_id)}


def test_a_slow_receiver_holds_up_only_its_first_message_of_a_batch(workspace, receiver, monkeypatch):
    # given a receiver that answers its first message late, and two messages for it in one batch
    monkeypatch.setattr(delivery_module, "SLOW_ANSWER_SECONDS", 0.2)
    receiver.script.append((204, 0.4))
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    run_cancel_request(run=make_run(workspace), reason="one")
    run_cancel_request(run=make_run(workspace), reason="two")
    start = timezone.now()
    # when the sender takes the batch, and again when the held-back message is due
    first = send_due(endpoint, now=start)
    later = send_due(endpoint, now=start + timedelta(seconds=5))
    # then the first was accepted, the second given back unattempted and sent on the next pass
    assert sorted(d.status for d in first) == ["pending", "succeeded"]
    [held] = [d for d in first if d.status == "pending"]
    assert held.attempts == 0
    assert "slow" in held.last_error
    assert [d.delivery_id for d in later] == [held.delivery_id]
    assert later[0].status == WebhookDelivery.Status.SUCCEEDED
    assert len(receiver.accepted()) == 2
