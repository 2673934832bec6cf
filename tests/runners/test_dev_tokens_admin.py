"""Development tokens in admin: minted with a required expiry and shown once, revocable; sessions listed
with their runners and whether their web process still answers, and disconnected."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from bindings.models import RunnerDescriptor
from langbot_sdk.protocol import ListAgentRunnersResponse
from runtimes.dev_access import (
    DevTokenRefused,
    dev_session_alive_key,
    dev_session_open,
    dev_session_runners_sync,
    dev_token_authenticate,
    dev_token_create,
)
from runtimes.models import DevelopmentToken
from tests.factories import UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

FORMAT = "%Y-%m-%d %H:%M:%S"


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def _add(client: Client, workspace_pk: int, expires_at: str) -> tuple[int, str]:
    response = client.post(
        reverse("admin:runtimes_developmenttoken_add"),
        {"workspace": workspace_pk, "name": "laptop", "expires_at_0": expires_at[:10], "expires_at_1": expires_at[11:]},
        follow=True,
    )
    return response.status_code, response.content.decode()


def test_a_token_minted_in_admin_is_shown_once_with_the_command_and_admits_until_revoked(admin_client):
    workspace = WorkspaceFactory.create()
    in_a_day = (timezone.localtime() + timedelta(days=1)).strftime(FORMAT)

    status, page = _add(admin_client, workspace.pk, in_a_day)

    assert status == 200
    shown = re.search(r"(lbdev_[0-9a-f]{12}_[A-Za-z0-9_-]{20,})", page)
    assert shown is not None, page[:2000]
    plaintext = shown.group(1)
    assert f"python -m langbot_sdk dev --host http://testserver --token {plaintext}" in page
    token = DevelopmentToken.objects.get()
    assert (token.workspace, token.name) == (workspace, "laptop")
    assert token.secret_sha256 not in page
    assert plaintext.rpartition("_")[2] not in token.secret_sha256
    assert dev_token_authenticate(plaintext=plaintext).pk == token.pk
    # Not shown again: the change page has the prefix only.
    change = admin_client.get(reverse("admin:runtimes_developmenttoken_change", args=[token.pk])).content.decode()
    assert token.prefix in change
    assert plaintext not in change

    admin_client.post(
        reverse("admin:runtimes_developmenttoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    with pytest.raises(DevTokenRefused) as refused:
        dev_token_authenticate(plaintext=plaintext)
    assert refused.value.code == "token_revoked"


def test_a_token_without_a_future_expiry_is_not_minted(admin_client):
    workspace = WorkspaceFactory.create()
    past = (timezone.localtime() - timedelta(minutes=1)).strftime(FORMAT)
    far = (timezone.localtime() + timedelta(days=400)).strftime(FORMAT)

    _, page_past = _add(admin_client, workspace.pk, past)
    _, page_far = _add(admin_client, workspace.pk, far)
    _, page_none = _add(admin_client, workspace.pk, "")

    assert "Pick a time in the future." in page_past
    assert "At most 90 days ahead." in page_far
    assert "This field is required." in page_none
    assert DevelopmentToken.objects.count() == 0


def test_sessions_are_listed_with_their_runners_and_state_and_can_be_disconnected(admin_client):
    token, _ = dev_token_create(workspace=WorkspaceFactory.create(), name="laptop")
    session = dev_session_open(token=token, peer="203.0.113.5:4242")
    dev_session_runners_sync(session=session, report=_report(RUNNER_ID))
    changelist = reverse("admin:runtimes_developmentsession_changelist")

    cache.set(dev_session_alive_key(session.session_id), 1, 30)
    page = admin_client.get(changelist).content.decode()
    cache.delete(dev_session_alive_key(session.session_id))
    gone = admin_client.get(changelist).content.decode()

    assert session.session_id[:8] in page
    assert RUNNER_ID in page
    assert "203.0.113.5:4242" in page
    assert ">connected<" in page
    assert ">not answering<" in gone  # its web process stopped without closing it

    # Disconnecting ends it even with nobody holding its socket: the runner is missing at once.
    admin_client.post(changelist, {"action": "disconnect", "_selected_action": [session.pk]})
    session.refresh_from_db()
    assert session.ended_at is not None
    assert session.close_reason == "disconnected by root"
    assert RunnerDescriptor.objects.get(runner_id=RUNNER_ID).status == RunnerDescriptor.Status.MISSING


RUNNER_ID = "plugin:alice/weather/default"


def _report(runner_id: str) -> ListAgentRunnersResponse:
    return ListAgentRunnersResponse.model_validate(
        {
            "runners": [
                {
                    "id": runner_id,
                    "name": "default",
                    "label": {"en_US": "Weather"},
                    "metadata": {"plugin": {"author": "alice", "name": "weather", "version": "0.1.0"}},
                }
            ],
            "plugins": [],
        }
    )
