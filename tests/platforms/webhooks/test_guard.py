"""The outbound address guard on webhooks: with private addresses not allowed (production's default), an
endpoint cannot be pointed at loopback, private, link-local or other non-public addresses — neither by a
literal address (in any encoding, 6to4 and NAT64 included) nor by a name that resolves to one, when it is
made or changed, nor when a name resolves to one only at send time (DNS rebinding): that delivery fails at
once with the reason, and nothing is sent. A workspace the operator let reach private addresses may."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from foundation import outbound
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from runners.lifecycle.services import run_cancel_request
from tests.factories import WebhookEndpointFactory
from tests.platforms.webhooks.conftest import make_run, send_due

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.216.34"


@pytest.fixture
def guarded(settings):
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False
    settings.LANGBOT_ALLOW_PRIVATE_ADDRESSES = False
    settings.LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE = False


@pytest.fixture
def dns(monkeypatch) -> dict[str, list[str]]:
    """What each host name resolves to (a name not in it does not resolve)."""
    names: dict[str, list[str]] = {}

    def resolve(host: str, port: int) -> list[str]:
        if host in names:
            return names[host]
        if host.replace(".", "").isdigit() or ":" in host:
            return [host]
        raise OSError(f"no such host {host}")

    monkeypatch.setattr(outbound, "resolve", resolve)
    return names


def _create(client, url: str):
    return client.post("/api/v1/webhooks", {"url": url, "event_types": ["run.cancelled"]}, format="json")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://10.1.2.3/hooks",
        "https://192.168.0.10/hooks",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:8000/hooks",
        "http://[::ffff:127.0.0.1]/hooks",
        "http://100.64.0.1/hooks",
        "http://0.0.0.0/hooks",
        "http://224.0.0.1/hooks",
        "http://[2002:7f00:1::1]:8125/w",
        "http://[64:ff9b::7f00:1]/hooks",
        "http://[2001:0:4136:401:0:0:80ff:fffe]/hooks",
    ],
)
def test_a_literal_non_public_address_is_refused_naming_the_url(api_client, guarded, dns, url):
    answer = _create(api_client, url)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "address.not_allowed"
    assert "LANGBOT_ALLOW_PRIVATE_ADDRESSES" in error["details"]["fields"]["url"]
    assert not WebhookEndpoint.objects.exists()


def test_a_name_resolving_to_a_private_address_is_refused_and_a_public_one_accepted(api_client, guarded, dns):
    dns["intranet.example.test"] = ["10.0.0.7"]
    dns["mixed.example.test"] = [PUBLIC, "127.0.0.1"]
    dns["hooks.example.test"] = [PUBLIC]
    refused = _create(api_client, "https://intranet.example.test/hooks")
    mixed = _create(api_client, "https://mixed.example.test/hooks")
    unknown = _create(api_client, "https://nowhere.example.test/hooks")
    accepted = _create(api_client, "https://hooks.example.test/hooks")
    assert refused.status_code == 400
    assert "10.0.0.7" in str(refused.json()["error"])
    # every address is checked, not only the first
    assert mixed.status_code == 400
    assert "127.0.0.1" in str(mixed.json()["error"])
    assert unknown.status_code == 400
    assert accepted.status_code == 201, accepted.json()
    # and a change of URL is checked as well
    patched = api_client.patch(
        f"/api/v1/webhooks/{accepted.json()['webhook_id']}", {"url": "http://[fe80::1]/hooks"}, format="json"
    )
    assert patched.status_code == 400
    assert WebhookEndpoint.objects.get().url == "https://hooks.example.test/hooks"


def test_a_name_that_resolves_to_a_private_address_at_send_time_fails_without_a_request(
    api_client, workspace, receiver, guarded, dns
):
    # given an endpoint whose name resolved to a public address when it was made
    port = urlsplit(receiver.url).port
    dns["hooks.example.test"] = [PUBLIC]
    assert _create(api_client, f"http://hooks.example.test:{port}/hooks/langbot").status_code == 201
    # when the name resolves to the loopback address at send time (DNS rebinding)
    dns["hooks.example.test"] = ["127.0.0.1"]
    run_cancel_request(run=make_run(workspace), reason="stop")
    [delivery] = send_due(WebhookEndpoint.objects.get())
    # then nothing reached the receiver, and the delivery failed at once, saying why
    assert receiver.requests == []
    delivery.refresh_from_db()
    assert delivery.status == WebhookDelivery.Status.FAILED
    assert delivery.attempts == 1
    assert delivery.next_attempt_at is None
    assert "127.0.0.1" in delivery.last_error
    assert "loopback" in delivery.last_error
    # and the due sweep does not try it again
    later = timezone.now() + timedelta(hours=1)
    assert send_due(WebhookEndpoint.objects.get(), now=later) == []


def test_when_private_addresses_are_allowed_the_sender_connects_to_the_address_it_resolved(
    workspace, receiver, settings, dns
):
    # given private addresses allowed, and a name the guard resolves to the receiver's address
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = True
    port = urlsplit(receiver.url).port
    dns["receiver.example.test"] = ["127.0.0.1"]
    endpoint = WebhookEndpointFactory.create(
        workspace=workspace, url=f"http://receiver.example.test:{port}/hooks/langbot"
    )
    run_cancel_request(run=make_run(workspace), reason="stop")
    # when the message is sent
    [delivery] = send_due(endpoint)
    # then it reached the receiver under the endpoint's host name
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    [received] = receiver.requests
    assert received["headers"]["host"] == f"receiver.example.test:{port}"


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        (PUBLIC, False),
        ("2606:2800:220:1:248:1893:25c8:1946", False),
        ("127.0.0.53", True),
        ("172.16.0.1", True),
        ("fd00::1", True),
        ("::", True),
        ("192.0.2.1", True),
        ("240.0.0.1", True),
    ],
)
def test_which_addresses_are_refused(address, refused):
    assert (outbound.address_refusal(address) is not None) is refused


def test_a_workspace_allowed_private_addresses_sends_to_a_local_receiver(api_client, workspace, receiver, guarded):
    # given the operator let this workspace reach private addresses (the host-wide switch is off)
    workspace.allow_private_addresses = True
    workspace.save()
    # when its endpoint points at a receiver on 127.0.0.1
    created = _create(api_client, receiver.url)
    assert created.status_code == 201, created.json()
    run_cancel_request(run=make_run(workspace), reason="stop")
    [delivery] = send_due(WebhookEndpoint.objects.get())
    # then the message reaches it
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    assert len(receiver.requests) == 1


def test_an_endpoint_saved_while_allowed_fails_once_the_operator_withdraws_private_addresses(
    workspace, receiver, guarded
):
    workspace.allow_private_addresses = True
    workspace.save()
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url)
    workspace.allow_private_addresses = False
    workspace.save()
    run_cancel_request(run=make_run(workspace), reason="stop")
    [delivery] = send_due(endpoint)
    assert receiver.requests == []
    assert delivery.status == WebhookDelivery.Status.FAILED
    assert "allow_private_addresses" in delivery.last_error
