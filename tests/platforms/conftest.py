"""Fixtures of the chat-platform tests: a fake Telegram Bot API, a Telegram bot pointed at it, and posting
updates to the bot's webhook as Telegram does."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from bindings.models import Bot
from tests.factories import BotFactory
from tests.fakes.platform_http import serving
from tests.fakes.telegram_server import BOT_USERNAME, TOKEN, FakeTelegram

SECRET = "webhook-secret-1"


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    with serving(FakeTelegram()) as fake:
        yield fake


@pytest.fixture
def telegram_bot_for(fake_telegram: FakeTelegram) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="telegram",
            credentials={
                "token": TOKEN,
                "secret_token": SECRET,
                "api_base_url": fake_telegram.origin,
                "username": BOT_USERNAME,
                **credentials,
            },
        )

    return make


def webhook_url(bot: Bot) -> str:
    return f"/platforms/telegram/{bot.workspace.slug}/{bot.bot_id}/webhook"


def post_update(bot: Bot, update: dict[str, Any], *, secret: str | None = SECRET, client: Client | None = None) -> Any:
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    return (client or Client()).post(
        webhook_url(bot), data=json.dumps(update), content_type="application/json", headers=headers
    )
