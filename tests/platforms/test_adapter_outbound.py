"""The outbound address guard on platform adapters: a bot whose `api_base_url` is on loopback (the local
fakes here) sends nothing there unless the operator allowed private addresses for its workspace — through
the guarded HTTP transport for Telegram and Discord (checked at every connection), through a check of the
address before each call for Slack and Lark, whose SDKs take no transport — and sends once allowed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from platforms.adapters.discord import DiscordAdapter
from platforms.adapters.lark import LarkAdapter
from platforms.adapters.slack import SlackAdapter
from platforms.adapters.telegram import TelegramAdapter
from platforms.interface import PlatformAdapter, PlatformAPIError, ReplyTarget
from platforms.registry import adapter_for_bot
from tests.factories import BotFactory, WorkspaceFactory
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.lark_server import FakeLark
from tests.fakes.platform_http import serving
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import TOKEN, FakeTelegram


@pytest.fixture(autouse=True)
def _private_addresses_refused(settings):
    # The test settings allow private addresses host-wide (local fakes); these tests need the default.
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False


def _send(adapter: PlatformAdapter, chat_id: str) -> None:
    async def go() -> None:
        try:
            await adapter.send_text(ReplyTarget(chat_id=chat_id), "hello")
        finally:
            await adapter.aclose()

    asyncio.run(go())


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with serving(FakeTelegram()) as fake:
        yield fake


def test_a_telegram_bot_on_loopback_sends_nothing_unless_its_workspace_is_allowed(telegram):
    credentials = {"token": TOKEN, "api_base_url": telegram.origin}
    refused = TelegramAdapter(bot_id="tg", credentials=credentials, allow_private=False)
    with pytest.raises(PlatformAPIError, match="loopback") as caught:
        _send(refused, "4242")
    assert caught.value.retryable is False
    assert telegram.calls == []
    _send(TelegramAdapter(bot_id="tg", credentials=credentials, allow_private=True), "4242")
    assert telegram.texts(4242) == ["hello"]


@pytest.mark.django_db
def test_an_adapter_made_for_a_bot_follows_its_workspaces_flag(telegram):
    refused = BotFactory.create(workspace=WorkspaceFactory.create(), platform="telegram")
    allowed = BotFactory.create(workspace=WorkspaceFactory.create(allow_private_addresses=True), platform="telegram")
    refused_adapter, allowed_adapter = adapter_for_bot(refused), adapter_for_bot(allowed)
    assert refused_adapter is not None
    assert allowed_adapter is not None
    assert refused_adapter.allow_private is False
    assert allowed_adapter.allow_private is True


@pytest.mark.parametrize(
    ("adapter_class", "fake_class", "credentials"),
    [
        (DiscordAdapter, FakeDiscord, {"token": "discord-token"}),
        (SlackAdapter, FakeSlack, {"bot_token": "xoxb-test", "signing_secret": "s"}),
        (LarkAdapter, FakeLark, {"app_id": "cli_test", "app_secret": "secret"}),
    ],
)
def test_discord_slack_and_lark_bots_on_loopback_send_nothing(adapter_class, fake_class, credentials):
    with serving(fake_class()) as fake:
        adapter = adapter_class(
            bot_id="b", credentials={**credentials, "api_base_url": fake.origin}, allow_private=False
        )
        with pytest.raises(PlatformAPIError, match="loopback") as refused:
            _send(adapter, "C1")
        # final: retrying cannot help until an operator acts
        assert refused.value.retryable is False
        assert not getattr(fake, "calls", None)
