"""The bot's admin page, as an operator setting up a chat platform uses it: one field per credential of
the platform chosen, checked on save (admin and API), "Test connection" calling the platform's identity
endpoint, and platform failures told in words."""

from __future__ import annotations

import pytest
from django.test import Client

from bindings.models import Bot
from tests.factories import BotFactory, UserFactory
from tests.fakes.telegram_server import BOT_USERNAME
from tests.platforms.conftest import SECRET, TOKEN

pytestmark = pytest.mark.django_db
ADD_URL = "/admin/bindings/bot/add/"


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def _errors(response) -> dict:
    context = response.context
    if context is None or "adminform" not in context:
        return {}
    return dict(context["adminform"].form.errors)


def _telegram(workspace, **credentials) -> dict:
    return {
        "workspace": str(workspace.pk),
        "bot_id": "tg",
        "name": "TG",
        "platform": "telegram",
        "enabled": "on",
        **{f"cred__telegram__{key}": value for key, value in credentials.items()},
        "_save": "Save",
    }


def test_the_add_page_has_one_field_per_credential_with_help_and_a_link(admin_client):
    page = admin_client.get(ADD_URL).content.decode()

    assert 'name="cred__telegram__token"' in page
    assert 'name="cred__telegram__secret_token"' in page
    assert 'name="cred__slack__signing_secret"' in page
    assert 'name="cred__discord__token"' in page
    assert "https://t.me/BotFather" in page  # where Telegram issues the token
    assert 'type="password" name="cred__telegram__token"' in page
    assert "bindings/bot_credentials.js" in page
    assert "A JSON object." not in page.split('name="cred__')[0]  # no JSON box first thing


def test_a_telegram_bot_without_its_secret_token_is_refused(admin_client, workspace):
    response = admin_client.post(ADD_URL, _telegram(workspace, token="123:abc"))

    assert response.status_code == 200
    assert _errors(response) == {"cred__telegram__secret_token": ["Required for a telegram bot."]}
    assert not Bot.objects.exists()


def test_a_token_of_the_wrong_shape_is_refused_in_words(admin_client, workspace):
    response = admin_client.post(ADD_URL, _telegram(workspace, token="not a token", secret_token="s3cret"))

    assert _errors(response)["cred__telegram__token"] == [
        "Does not look like a Telegram bot token (digits, a colon, then letters)."
    ]


def test_a_saved_secret_is_never_shown_and_an_empty_box_keeps_it(admin_client, workspace):
    created = admin_client.post(ADD_URL, _telegram(workspace, token="123:abc", secret_token="s3cret"))
    assert created.status_code == 302, _errors(created)
    bot = Bot.objects.get()
    assert bot.credentials == {"token": "123:abc", "secret_token": "s3cret"}
    url = f"/admin/bindings/bot/{bot.pk}/change/"

    page = admin_client.get(url).content.decode()
    changed = admin_client.post(url, _telegram(workspace, token="", secret_token="", username="mybot"))

    assert "123:abc" not in page
    assert "s3cret" not in page
    assert "stored — leave empty to keep" in page
    assert changed.status_code == 302, _errors(changed)
    bot.refresh_from_db()
    assert bot.credentials == {"token": "123:abc", "secret_token": "s3cret", "username": "mybot"}


def test_a_bot_of_a_platform_no_adapter_serves_is_refused(admin_client, api_client, workspace):
    response = api_client.post("/api/v1/bots", {"name": "x", "platform": "other"}, format="json")
    page = admin_client.post(
        ADD_URL,
        {"workspace": str(workspace.pk), "bot_id": "o", "name": "O", "platform": "other", "_save": "Save"},
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "platform.unsupported"
    assert response.json()["error"]["details"]["fields"] == {"platform": "No adapter serves other bots on this host."}
    assert _errors(page) == {"platform": ["No adapter serves other bots on this host."]}
    assert not Bot.objects.exists()


def test_the_api_checks_a_telegram_bots_credentials_too(api_client):
    response = api_client.post(
        "/api/v1/bots", {"name": "tg", "platform": "telegram", "credentials": {"token": "123:abc"}}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"] == {"credentials.secret_token": "Required for a telegram bot."}


LARK_NEEDS_A_PROOF = "Give the verification token or the encrypt key (or both): without either, no event is taken."


def test_a_lark_bot_needs_its_verification_token_or_its_encrypt_key(admin_client, api_client, workspace):
    app = {"app_id": "cli_a1", "app_secret": "s3cret"}
    neither = api_client.post("/api/v1/bots", {"name": "lk", "platform": "lark", "credentials": app}, format="json")
    page = admin_client.post(
        ADD_URL,
        {
            "workspace": str(workspace.pk), "bot_id": "lk", "name": "LK", "platform": "lark", "_save": "Save",
            **{f"cred__lark__{key}": value for key, value in app.items()},
        },
    )  # fmt: skip
    with_key = api_client.post(
        "/api/v1/bots",
        {"name": "lk", "platform": "lark", "credentials": {**app, "encrypt_key": "k"}},
        format="json",
    )

    assert neither.status_code == 400
    assert neither.json()["error"]["details"]["fields"] == {"credentials.verification_token": LARK_NEEDS_A_PROOF}
    assert _errors(page) == {"cred__lark__verification_token": [LARK_NEEDS_A_PROOF]}
    assert with_key.status_code == 201, with_key.content


def test_test_connection_calls_getme_and_says_who_the_bot_is(admin_client, workspace, telegram_bot_for):
    bot = telegram_bot_for(workspace, username="")
    url = f"/admin/bindings/bot/{bot.pk}/change/"

    page = admin_client.get(url).content.decode()
    tested = admin_client.post(f"/admin/bindings/bot/{bot.pk}/test-connection/", follow=True).content.decode()

    assert 'id="test-connection"' in page
    assert f"Telegram knows this bot as @{BOT_USERNAME}" in tested
    bot.refresh_from_db()
    assert bot.credentials["username"] == BOT_USERNAME


def test_an_unreachable_platform_is_told_in_words_not_a_python_repr(admin_client, workspace, settings):
    bot = BotFactory.create(
        workspace=workspace,
        platform="telegram",
        credentials={"token": TOKEN, "secret_token": SECRET, "api_base_url": "https://api.telegram.invalid"},
    )

    listed = admin_client.post(
        "/admin/bindings/bot/", {"action": "platform_connection_test", "_selected_action": [bot.pk]}, follow=True
    ).content.decode()

    assert "could not reach api.telegram.invalid: name not resolved" in listed
    assert "Errno" not in listed
    assert "httpx" not in listed


def test_the_webhook_registration_says_the_url_it_registered(admin_client, workspace, telegram_bot_for):
    bot = telegram_bot_for(workspace)

    page = admin_client.post(
        "/admin/bindings/bot/", {"action": "platform_webhook_set", "_selected_action": [bot.pk]}, follow=True
    ).content.decode()

    assert f"webhook URL: http://testserver/platforms/telegram/{workspace.slug}/{bot.bot_id}/webhook" in page


def test_the_openapi_schema_tells_api_clients_of_platform_unsupported():
    paths = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]

    for method, operation in (("post", "/api/v1/bots"), ("patch", "/api/v1/bots/{bot_id}")):
        assert "platform.unsupported" in paths[operation][method]["responses"]["400"]["description"]
