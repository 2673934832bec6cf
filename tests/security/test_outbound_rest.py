"""The outbound address guard as a tenant meets it through the REST API with an ordinary workspace key:
a model provider or a bot's `api_base_url` on loopback, and a webhook on a 6to4 spelling of loopback,
answer 400 `address.not_allowed` naming the field and what would allow it; a workspace the operator
allowed private addresses may save them; and the flag itself is an operator's — no workspace key can set
it, only a superuser in the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from bindings.models import Bot, Workspace
from bindings.services import workspace_member_add
from resources.models import ModelProvider
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _private_addresses_refused(settings):
    # The test settings allow private addresses host-wide (local fakes); these tests need the default.
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False


def _provider(client, base_url: str):
    return client.post("/api/v1/model-providers", {"name": "Local", "base_url": base_url}, format="json")


def _bot(client, api_base_url: str):
    credentials = {"token": "123456:test-token", "secret_token": "s3cret", "api_base_url": api_base_url}
    body = {"name": "tg", "platform": "telegram", "credentials": credentials}
    return client.post("/api/v1/bots", body, format="json")


def _refused(answer, field: str) -> str:
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert error["code"] == "address.not_allowed"
    message = error["details"]["fields"][field]
    assert "allow_private_addresses" in message
    assert "LANGBOT_ALLOW_PRIVATE_ADDRESSES" in message
    return message


@pytest.mark.parametrize(
    "base_url",
    ["http://127.0.0.1:8125/v1", "http://localhost:11434/v1", "http://2130706433:8125/v1", "http://[::1]:8000/v1"],
)
def test_a_provider_on_loopback_is_refused_naming_base_url(api_client, base_url):
    message = _refused(_provider(api_client, base_url), "base_url")
    assert "loopback" in message
    assert not ModelProvider.objects.exists()


def test_a_provider_moved_to_the_metadata_address_by_patch_is_refused(api_client, monkeypatch):
    from foundation import outbound

    monkeypatch.setattr(outbound, "resolve", lambda host, port: ["93.184.216.34"])
    created = _provider(api_client, "https://api.example.test/v1")
    assert created.status_code == 201, created.json()
    monkeypatch.undo()
    provider_id = created.json()["provider_id"]
    patched = api_client.patch(
        f"/api/v1/model-providers/{provider_id}", {"base_url": "http://169.254.169.254/latest"}, format="json"
    )
    assert "link-local" in _refused(patched, "base_url")
    assert ModelProvider.objects.get().base_url == "https://api.example.test/v1"


def test_a_bot_whose_api_base_url_is_on_loopback_is_refused(api_client):
    message = _refused(_bot(api_client, "http://127.0.0.1:8125"), "credentials.api_base_url")
    assert "loopback" in message
    assert not Bot.objects.exists()


def test_a_webhook_on_a_6to4_spelling_of_loopback_is_refused(api_client):
    answer = api_client.post(
        "/api/v1/webhooks", {"url": "http://[2002:7f00:1::1]:8125/w", "event_types": ["run.failed"]}, format="json"
    )
    assert "127.0.0.1, which is a loopback address" in _refused(answer, "url")


def test_a_workspace_the_operator_allowed_saves_local_addresses(workspace, api_client, api_client_for):
    workspace.allow_private_addresses = True
    workspace.save()
    assert _provider(api_client, "http://127.0.0.1:11434/v1").status_code == 201
    assert _bot(api_client, "http://127.0.0.1:8081").status_code == 201
    webhook = api_client.post(
        "/api/v1/webhooks", {"url": "http://10.0.0.8/hooks", "event_types": ["run.failed"]}, format="json"
    )
    assert webhook.status_code == 201
    # and another workspace on the same host still may not
    other = api_client_for(WorkspaceFactory.create())
    _refused(_provider(other, "http://127.0.0.1:11434/v1"), "base_url")


def test_no_workspace_key_can_set_the_flag(workspace, api_client):
    # no route writes a workspace, and the writable shapes refuse the key
    assert (
        api_client.patch(f"/api/v1/workspaces/{workspace.slug}", {"allow_private_addresses": True}).status_code == 404
    )
    sneaky = api_client.post(
        "/api/v1/model-providers",
        {"name": "p", "base_url": "http://127.0.0.1/v1", "allow_private_addresses": True},
        format="json",
    )
    assert sneaky.status_code == 400
    workspace.refresh_from_db()
    assert workspace.allow_private_addresses is False


def test_a_superuser_sets_the_flag_in_the_admin_and_other_staff_only_see_it(client, workspace):
    users = get_user_model().objects
    root = users.create_superuser("root", "root@example.test", "pw")
    client.force_login(root)
    page = f"/admin/bindings/workspace/{workspace.pk}/change/"
    form = {
        "slug": workspace.slug,
        "name": workspace.name,
        "allow_private_addresses": "on",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
    }
    saved = client.post(page, form)
    assert saved.status_code == 302, saved.content[:2000]
    assert Workspace.objects.get(pk=workspace.pk).allow_private_addresses is True

    staff = users.create_user("staff", "staff@example.test", "pw", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["change_workspace", "view_workspace"]))
    workspace_member_add(workspace=workspace, user=staff)
    client.force_login(staff)
    edited = client.post(page, {**form, "name": "Renamed", "allow_private_addresses": ""})
    assert edited.status_code == 302, edited.content[:2000]
    # a staff member who is not a superuser edits the workspace but cannot withdraw (or grant) the flag
    after = Workspace.objects.get(pk=workspace.pk)
    assert after.name == "Renamed"
    assert after.allow_private_addresses is True
