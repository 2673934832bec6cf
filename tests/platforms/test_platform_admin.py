"""Admin: "Set the platform webhook" on the bots' list calls Telegram's setWebhook with the bot's URL and
secret, and a run's page lists its platform deliveries."""

from __future__ import annotations

import pytest
from django.test import Client

from platforms.models import PlatformDelivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, UserFactory
from tests.fakes.telegram_server import BOT_USERNAME
from tests.platforms.conftest import SECRET, post_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_set_the_platform_webhook_registers_the_bots_url_and_secret_with_telegram(
    admin_client, workspace, telegram_bot_for, fake_telegram
):
    bot = telegram_bot_for(workspace, username="")
    webui = BotFactory.create(workspace=workspace, platform="webui")

    page = admin_client.post(
        "/admin/bindings/bot/",
        {"action": "platform_webhook_set", "_selected_action": [bot.pk, webui.pk]},
        follow=True,
    )

    assert page.status_code == 200
    assert fake_telegram.webhook["url"] == f"http://testserver/platforms/telegram/{workspace.slug}/{bot.bot_id}/webhook"
    assert fake_telegram.webhook["secret_token"] == SECRET
    text = page.content.decode()
    assert f"@{BOT_USERNAME}" in text
    assert "no adapter serves webui bots" in text
    bot.refresh_from_db()
    assert bot.credentials["username"] == BOT_USERNAME  # kept for mentions in groups


def test_a_runs_page_shows_its_failed_platform_delivery(admin_client, workspace, telegram_bot_for, fake_telegram):
    AgentBindingFactory.create(workspace=workspace)
    bot = telegram_bot_for(workspace)
    post_update(bot, fake_telegram.message_update("hi"))
    run = Run.objects.get()
    PlatformDelivery.objects.create(
        workspace=workspace, run=run, bot=bot, platform="telegram", status="failed",
        chat_id="4242", error={"code": "platform_error", "message": "Forbidden: bot was blocked by the user"},
    )  # fmt: skip

    page = admin_client.get(f"/admin/runners/run/{run.pk}/change/")

    assert page.status_code == 200
    assert "bot was blocked by the user" in page.content.decode()
