"""No secret in the log at any level: every platform, provider, webhook and MCP path is driven at DEBUG with
the log formatter `settings.LOGGING` installs, and the captured text is searched for every secret the test
configured. Each test also checks the line that would have carried the secret was written (so the
redaction, not silence, is what passes it)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils.module_loading import import_string

from foundation.log_context import RunContextFilter
from foundation.log_redaction import MASK, redact, secret_register
from platforms.interface import ReplyTarget
from platforms.webhooks.models import WebhookDelivery
from resources.models import ModelProvider
from resources.providers.clients import openai_client
from runners.lifecycle.services import run_cancel_request
from tests.factories import BotFactory, WebhookEndpointFactory, WorkspaceFactory
from tests.fakes.discord_server import TOKEN as DISCORD_TOKEN
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.lark_server import APP_ID, APP_SECRET, FakeLark
from tests.fakes.mcp_fixtures import HttpMCP, mcp_cleanup_fixture, mcp_http_fixture  # noqa: F401
from tests.fakes.openai_server import fake_openai
from tests.fakes.platform_http import serving
from tests.fakes.slack_server import BOT_TOKEN as SLACK_TOKEN
from tests.fakes.slack_server import SIGNING_SECRET, FakeSlack
from tests.fakes.telegram_server import TOKEN as TELEGRAM_TOKEN
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.webhooks.conftest import make_run, send_due
from tests.platforms.webhooks.receiver import WebhookReceiver

TELEGRAM_SECRET = "tg-webhook-secret-7731"
PROVIDER_KEY = "sk-provider-key-8841-never-logged"


class CapturedLog:
    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def assert_free_of(self, *secrets: str) -> None:
        for secret in secrets:
            assert secret not in self.text, f"a secret ({secret[:4]}…) is in the log"


@pytest.fixture
def debug_log() -> Iterator[CapturedLog]:
    """Every logger at DEBUG into one stream, through the formatter and filter that `settings.LOGGING`
    configures for the console."""
    logging_config: dict[str, Any] = settings.LOGGING
    plain: dict[str, str] = logging_config["formatters"]["plain"]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(import_string(plain["class"])(plain["format"]))
    handler.addFilter(RunContextFilter())
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in [*logging.root.manager.loggerDict, ""]}
    for name in levels:
        logging.getLogger(name).setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield CapturedLog(stream)
    finally:
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_a_secret_shaped_value_is_masked_even_when_this_process_never_decrypted_it():
    line = (
        "POST https://api.telegram.org/bot123456:AAunknown-token-x/sendMessage "
        "headers={'Authorization': 'Bearer sk-unknown-1234'} https://u:pw-unknown@example.com/?access_token=abc123"
    )

    redacted = redact(line)

    for secret in ("AAunknown-token-x", "sk-unknown-1234", "pw-unknown", "abc123"):
        assert secret not in redacted
    assert redacted.count(MASK) == 4
    assert "/sendMessage" in redacted
    assert "example.com" in redacted


def test_a_registered_secret_is_masked_wherever_it_appears_but_addresses_are_not():
    secret_register({"token": "plain-word-secret-value", "api_base_url": "http://10.0.0.7:8080"})

    redacted = redact("sent plain-word-secret-value to http://10.0.0.7:8080")

    assert redacted == f"sent {MASK} to http://10.0.0.7:8080"


@pytest.mark.django_db(transaction=True)
async def test_telegram_replies_and_webhooks_at_debug_log_no_token_or_secret(debug_log):
    from platforms.adapters.telegram import TelegramAdapter

    with serving(FakeTelegram()) as fake:
        adapter = TelegramAdapter(
            bot_id="tg",
            credentials={"token": TELEGRAM_TOKEN, "secret_token": TELEGRAM_SECRET, "api_base_url": fake.origin},
        )
        try:
            await adapter.send_text(ReplyTarget(chat_id="4242"), "hello")
        finally:
            await adapter.aclose()

    assert "sendMessage" in debug_log.text  # httpx's request line, with the token's place masked
    debug_log.assert_free_of(TELEGRAM_TOKEN.split(":", 1)[1], TELEGRAM_SECRET)


@pytest.mark.django_db
def test_a_telegram_webhook_with_a_wrong_secret_logs_neither_secret(debug_log):
    workspace = WorkspaceFactory.create()
    bot = BotFactory.create(
        workspace=workspace,
        platform="telegram",
        credentials={"token": TELEGRAM_TOKEN, "secret_token": TELEGRAM_SECRET, "api_base_url": "http://127.0.0.1:9"},
    )
    forged = "forged-secret-guess-0001"

    response = Client().post(
        f"/platforms/telegram/{workspace.slug}/{bot.bot_id}/webhook",
        data="{}",
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": forged},
    )

    assert response.status_code in (401, 403)
    assert "refused" in debug_log.text
    debug_log.assert_free_of(TELEGRAM_SECRET, TELEGRAM_TOKEN.split(":", 1)[1])


@pytest.mark.django_db(transaction=True)
async def test_slack_replies_at_debug_log_no_bot_token(debug_log):
    from platforms.adapters.slack import SlackAdapter

    with serving(FakeSlack()) as fake:
        adapter = SlackAdapter(
            bot_id="sl",
            credentials={
                "bot_token": SLACK_TOKEN,
                "signing_secret": SIGNING_SECRET,
                "api_base_url": f"{fake.origin}/api",
            },
        )
        try:
            await adapter.send_text(ReplyTarget(chat_id="C0CHANNEL"), "hello")
        finally:
            await adapter.aclose()

    assert "chat.postMessage" in debug_log.text
    debug_log.assert_free_of(SLACK_TOKEN, SIGNING_SECRET)


@pytest.mark.django_db(transaction=True)
async def test_lark_replies_at_debug_log_no_app_secret_or_tenant_token(debug_log):
    from platforms.adapters.lark import LarkAdapter

    with serving(FakeLark()) as fake:
        adapter = LarkAdapter(
            bot_id="lk", credentials={"app_id": APP_ID, "app_secret": APP_SECRET, "api_base_url": fake.origin}
        )
        try:
            await adapter.send_text(ReplyTarget(chat_id="oc_p2p"), "hello")
        finally:
            await adapter.aclose()
        tenant_tokens = list(fake.tokens)

    assert fake.texts("oc_p2p") == ["hello"]
    assert tenant_tokens
    debug_log.assert_free_of(APP_SECRET, *tenant_tokens)


@pytest.mark.django_db(transaction=True)
async def test_discord_replies_at_debug_log_no_bot_token(debug_log):
    from platforms.adapters.discord import DiscordAdapter

    with serving(FakeDiscord()) as fake:
        adapter = DiscordAdapter(bot_id="dc", credentials={"token": DISCORD_TOKEN, "api_base_url": fake.api_base_url})
        try:
            await adapter.send_text(ReplyTarget(chat_id="1000000000000000042"), "hello")
        finally:
            await adapter.aclose()

    assert "/channels/" in debug_log.text
    debug_log.assert_free_of(DISCORD_TOKEN)


@pytest.mark.django_db
def test_a_model_call_at_debug_logs_no_provider_key(debug_log):
    workspace = WorkspaceFactory.create()
    with fake_openai() as fake:
        fake.reply(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
        )
        provider = ModelProvider.objects.create(
            workspace=workspace, name="local", base_url=fake.base_url, api_key=PROVIDER_KEY
        )
        provider = ModelProvider.objects.get(pk=provider.pk)
        answer = openai_client(provider).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])

    assert answer.choices[0].message.content == "hi"
    assert fake.headers[-1]["authorization"] == f"Bearer {PROVIDER_KEY}"  # the key was really sent
    assert "chat/completions" in debug_log.text
    debug_log.assert_free_of(PROVIDER_KEY)


@pytest.mark.django_db
def test_a_completion_webhook_at_debug_logs_no_signing_secret(debug_log):
    workspace = WorkspaceFactory.create()
    with serving(WebhookReceiver()) as receiver:
        endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url, event_types=["run.cancelled"])
        run_cancel_request(run=make_run(workspace), reason="user asked")
        [delivery] = send_due(endpoint)

    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    debug_log.assert_free_of(endpoint.secret, endpoint.secret.removeprefix("whsec_"))


@pytest.mark.django_db
def test_an_mcp_server_over_http_at_debug_logs_no_header_secret(debug_log, mcp_http: HttpMCP):
    from resources.mcp.services import mcp_server_refresh

    workspace = WorkspaceFactory.create()
    server = mcp_http.server(workspace)

    refreshed: Any = mcp_server_refresh(server=server)

    assert refreshed.last_error in ("", None)
    assert "/mcp" in debug_log.text
    debug_log.assert_free_of(mcp_http.token)
