"""The website chat widget in the admin: a web bot's allowed origins are edited on its form (one a line, checked
and normalized), and its page shows the embed snippet to copy."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from bindings.models import Bot
from tests.factories import BotFactory, UserFactory, WorkspaceFactory
from webchat.widget import origin_normalized, widget_public_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def _add(client: Client, *, platform: str = "webui", origins: str = "", **extra: Any) -> Any:
    workspace = WorkspaceFactory.create()
    return client.post(
        "/admin/bindings/bot/add/",
        {
            "workspace": workspace.pk, "bot_id": "site", "name": "Site", "platform": platform, "enabled": "on",
            "credentials_input": "{}", "allowed_origins": origins, **extra,
        },
    )  # fmt: skip


def _errors(response: Any) -> dict[str, Any]:
    context = response.context
    if context is None or "adminform" not in context:
        return {}
    return dict(context["adminform"].form.errors)


def test_allowed_origins_are_saved_one_a_line_normalized_and_without_repeats(admin_client):
    response = _add(
        admin_client, origins="https://Shop.Example.com/\nhttp://localhost:8080, https://shop.example.com:443"
    )

    assert response.status_code == 302, _errors(response)
    stored = Bot.objects.get(bot_id="site").allowed_origins
    assert stored == ["https://shop.example.com", "http://localhost:8080"]
    assert [origin_normalized(o) for o in stored] == stored, "stored as the widget compares them"


@pytest.mark.parametrize(
    "origin",
    ["https://shop.example.com/checkout", "*.example.com", "https://*.example.com", "shop.example.com",
     "ftp://shop.example.com", "https://user:pw@shop.example.com", "https://shop.example.com?x=1"],
)  # fmt: skip
def test_anything_but_an_origin_is_refused_on_the_field(admin_client, origin):
    response = _add(admin_client, origins=f"https://ok.example.com\n{origin}")

    assert response.status_code == 200
    assert "allowed_origins" in _errors(response)
    assert not Bot.objects.exists()


def test_only_a_web_bot_has_origins_to_allow(admin_client):
    response = _add(admin_client, platform="api", origins="https://shop.example.com")

    assert response.status_code == 200
    assert _errors(response)["allowed_origins"] == ["Only a web bot (platform Web UI) has a chat widget to embed."]


def test_a_web_bots_page_shows_its_origins_and_the_embed_snippet(admin_client):
    bot = BotFactory.create(
        workspace=WorkspaceFactory.create(), allowed_origins=["https://a.example", "https://b.example"]
    )

    page = admin_client.get(f"/admin/bindings/bot/{bot.pk}/change/").content.decode()

    assert "https://a.example\nhttps://b.example</textarea>" in page
    snippet = f"&lt;script src=&quot;http://testserver/widget.js&quot; data-bot=&quot;{widget_public_id(bot)}&quot;"
    assert snippet in page
    assert 'data-copy-target="widget-snippet"' in page
    assert "the widget stays off" not in page


def test_a_web_bot_without_origins_is_told_its_widget_is_off_and_other_bots_get_no_snippet(admin_client):
    web = BotFactory.create(workspace=WorkspaceFactory.create(), allowed_origins=[])
    api = BotFactory.create(workspace=WorkspaceFactory.create(), platform="api")

    web_page = admin_client.get(f"/admin/bindings/bot/{web.pk}/change/").content.decode()
    api_page = admin_client.get(f"/admin/bindings/bot/{api.pk}/change/").content.decode()

    assert "the widget stays off" in web_page
    assert "widget-snippet" not in api_page
