"""REST CRUD of bots: credentials are write-only, stored encrypted and shown masked."""

from __future__ import annotations

import pytest

from bindings.models import Bot
from bindings.specs import BOT_PLATFORMS
from foundation.crypto import SECRET_MASK
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


def test_create_a_bot_and_see_its_credentials_only_masked(api_client):
    response = api_client.post(
        "/api/v1/bots",
        {"bot_id": "tg", "name": "Telegram", "platform": "api", "credentials": {"token": "123:abc"}},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["credentials"] == {"token": SECRET_MASK}
    assert "123:abc" not in api_client.get("/api/v1/bots").content.decode()
    assert Bot.objects.get().credentials == {"token": "123:abc"}


def test_patch_with_the_mask_keeps_credentials_and_a_new_value_replaces_them(api_client):
    api_client.post("/api/v1/bots", {"bot_id": "tg", "credentials": {"token": "t1", "secret": "s1"}}, format="json")

    api_client.patch("/api/v1/bots/tg", {"credentials": {"token": SECRET_MASK, "secret": "s2"}}, format="json")

    assert Bot.objects.get().credentials == {"token": "t1", "secret": "s2"}


def test_a_mask_for_a_credential_never_stored_is_refused(api_client):
    api_client.post("/api/v1/bots", {"bot_id": "tg"}, format="json")

    response = api_client.patch("/api/v1/bots/tg", {"credentials": {"token": SECRET_MASK}}, format="json")

    assert response.status_code == 400
    assert "credentials.token" in response.json()["error"]["details"]["fields"]


def test_unknown_platform_is_a_field_error(api_client):
    response = api_client.post("/api/v1/bots", {"bot_id": "x", "platform": "pager"}, format="json")

    assert "platform" in response.json()["error"]["details"]["fields"]


def test_another_workspaces_bot_answers_404(api_client):
    BotFactory.create(workspace=WorkspaceFactory.create(), bot_id="theirs")

    assert api_client.get("/api/v1/bots/theirs").status_code == 404
    assert api_client.delete("/api/v1/bots/theirs").status_code == 404


def test_a_bot_that_bindings_use_cannot_be_deleted(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="helpdesk")
    AgentBindingFactory.create(workspace=workspace, binding_id="helpdesk-qa", scope_type="bot", scope_id="helpdesk")

    response = api_client.delete("/api/v1/bots/helpdesk")

    assert response.status_code == 409
    assert "helpdesk-qa" in response.json()["error"]["details"]["fields"]["bot_id"]
    assert Bot.objects.filter(bot_id="helpdesk").exists()


def test_an_unused_bot_is_deleted(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="spare")

    assert api_client.delete("/api/v1/bots/spare").status_code == 204
    assert not Bot.objects.exists()


def test_the_api_and_the_model_know_the_same_platforms():
    # A platform added to one and not the other would be refused by REST or by the database's choices.
    assert set(BOT_PLATFORMS) == set(Bot.Platform.values)


def test_a_web_bots_allowed_origins_are_checked_and_stored_as_the_admin_form_stores_them(api_client):
    created = api_client.post(
        "/api/v1/bots",
        {
            "bot_id": "site",
            "platform": "webui",
            "allowed_origins": ["HTTPS://Shop.Example.com:443/", "https://shop.example.com"],
        },
        format="json",
    )
    bad = api_client.patch(
        "/api/v1/bots/site", {"allowed_origins": ["https://shop.example.com/chat", "*"]}, format="json"
    )
    patched = api_client.patch("/api/v1/bots/site", {"allowed_origins": ["http://localhost:8080"]}, format="json")

    assert created.status_code == 201, created.content
    assert created.json()["allowed_origins"] == ["https://shop.example.com"]
    assert bad.status_code == 400
    assert "allowed_origins" in bad.json()["error"]["details"]["fields"]
    assert patched.json()["allowed_origins"] == ["http://localhost:8080"]
    assert api_client.get("/api/v1/bots/site").json()["allowed_origins"] == ["http://localhost:8080"]
    assert Bot.objects.get(bot_id="site").allowed_origins == ["http://localhost:8080"]


def test_only_a_web_bot_takes_allowed_origins(api_client):
    refused = api_client.post(
        "/api/v1/bots",
        {"bot_id": "programs", "platform": "api", "allowed_origins": ["https://a.example"]},
        format="json",
    )
    api_client.post("/api/v1/bots", {"bot_id": "site", "allowed_origins": ["https://a.example"]}, format="json")
    moved = api_client.patch("/api/v1/bots/site", {"platform": "api"}, format="json")
    cleared = api_client.patch("/api/v1/bots/site", {"platform": "api", "allowed_origins": []}, format="json")

    assert refused.status_code == 400
    assert "allowed_origins" in refused.json()["error"]["details"]["fields"]
    assert not Bot.objects.filter(bot_id="programs").exists()
    assert moved.status_code == 400
    assert cleared.status_code == 200, cleared.content
    assert cleared.json()["allowed_origins"] == []
    assert Bot.objects.get(bot_id="site").platform == "api"
