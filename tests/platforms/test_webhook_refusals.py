"""What the platform webhooks refuse, through the real routes and adapters: junk bodies (too deep, not an
object, fields of the wrong type, too large) answer 400/413 in the error shape and never a 500 or a
traceback; forged requests are counted in one row per bot, reason, source and window, logged once, and a
source past the limit is answered 429 while a genuine request from it still goes through; Lark refuses a
push signed too long ago; the retention sweep removes old refusal rows; the admin shows the count."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from bindings.models import Bot
from platforms.models import InboundRefusal
from runners.lifecycle.retention import retention_sweep
from tests.factories import BotFactory, UserFactory
from tests.fakes.lark_server import ENCRYPT_KEY, VERIFICATION_TOKEN, encrypt, sign
from transcripts.models import EventLog, RetentionPurge

SECRET = "webhook-secret-1"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def one_window(settings: Any) -> None:
    """Windows of about 30 years: a test's refusals never straddle two, whenever it runs."""
    settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS = 10**9


@pytest.fixture
def telegram_bot(workspace: Any) -> Bot:
    return BotFactory.create(
        workspace=workspace, platform="telegram", credentials={"token": "123:abc", "secret_token": SECRET}
    )


@pytest.fixture
def lark_bot(workspace: Any) -> Bot:
    return BotFactory.create(
        workspace=workspace,
        platform="lark",
        credentials={"app_id": "cli_a", "app_secret": "s", "verification_token": VERIFICATION_TOKEN},
    )


@pytest.fixture
def signed_lark_bot(workspace: Any) -> Bot:
    return BotFactory.create(
        workspace=workspace,
        platform="lark",
        credentials={"app_id": "cli_a", "app_secret": "s", "verification_token": VERIFICATION_TOKEN,
                     "encrypt_key": ENCRYPT_KEY},
    )  # fmt: skip


def _url(bot: Bot) -> str:
    return f"/platforms/{bot.platform}/{bot.workspace.slug}/{bot.bot_id}/webhook"


def _post(bot: Bot, body: bytes | str, *, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    return Client().post(_url(bot), data=body, content_type="application/json", headers=headers or {}, **extra)


def _telegram(bot: Bot, body: bytes | str, *, secret: str = SECRET, **extra: Any) -> Any:
    return _post(bot, body, headers={"X-Telegram-Bot-Api-Secret-Token": secret}, **extra)


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_lark_answers_a_100000_deep_body_400_without_a_traceback(lark_bot, caplog):
    deep = "[" * 100_000 + "]" * 100_000
    deep_object = '{"a":' * 100_000 + "1" + "}" * 100_000

    answers = [_post(lark_bot, deep), _post(lark_bot, deep_object)]

    assert [a.status_code for a in answers] == [400, 400]
    assert {a.json()["error"]["code"] for a in answers} == {"invalid_argument"}
    assert _tracebacks(caplog) == []


def test_telegram_with_a_valid_secret_answers_a_list_a_deep_array_and_wrong_field_types_400(telegram_bot, caplog):
    message = {"message_id": 1, "date": 1700000000, "chat": {"id": 5, "type": "private"},
               "from": {"id": 7, "is_bot": False, "first_name": "Ada"}, "text": "hi"}  # fmt: skip
    bodies: list[bytes | str] = [
        "[1,2]",
        "[" * 5000 + "]" * 5000,
        json.dumps({"update_id": 1, "message": [1, 2]}),
        json.dumps({"update_id": 1, "message": {**message, "chat": "not a chat"}}),
        json.dumps({"update_id": 1, "message": {**message, "date": 10**400}}),
        json.dumps({"update_id": 1, "message": {**message, "entities": 5}}),
        b"\xff\xfe not utf-8",
    ]

    answers = [_telegram(telegram_bot, body) for body in bodies]

    assert [a.status_code for a in answers] == [400] * len(bodies)
    assert {a.json()["error"]["code"] for a in answers} == {"invalid_argument"}
    assert not EventLog.objects.exists()
    assert _tracebacks(caplog) == []


def test_a_body_over_the_api_limit_answers_413_before_it_is_read(telegram_bot, settings):
    settings.LANGBOT_API_BODY_MAX_BYTES = 1000

    answer = _telegram(telegram_bot, json.dumps({"update_id": 1, "pad": "x" * 2000}))

    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"


def test_300_forged_requests_make_one_counted_row_two_log_lines_and_429s_past_the_limit(telegram_bot, settings, caplog):
    settings.LANGBOT_INBOUND_REFUSALS_PER_WINDOW = 20
    caplog.set_level(logging.INFO)

    answers = [_telegram(telegram_bot, "{}", secret="guessed") for _ in range(300)]

    statuses = [a.status_code for a in answers]
    assert statuses[:20] == [401] * 20
    assert statuses[20:] == [429] * 280
    assert int(answers[-1]["Retry-After"]) <= settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS
    assert answers[-1].json()["error"]["code"] == "rate_limited"
    rows = list(InboundRefusal.objects.values_list("bot_id", "reason", "remote_addr", "count"))
    assert rows == [(telegram_bot.pk, "forged", "127.0.0.1", 300)]
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2  # the row made, and the limit passed; django.request logs none of them


def test_a_genuine_update_from_a_throttled_address_is_still_taken(telegram_bot, settings):
    settings.LANGBOT_INBOUND_REFUSALS_PER_WINDOW = 3
    for _ in range(5):
        _telegram(telegram_bot, "{}", secret="guessed")

    genuine = _telegram(telegram_bot, json.dumps({"update_id": 1}))

    assert genuine.status_code == 200


def test_forged_requests_from_one_ipv6_64_count_together_and_other_sources_apart(telegram_bot, settings):
    settings.LANGBOT_INBOUND_REFUSALS_PER_WINDOW = 2
    sources = ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9", "2001:db8:1:2::3", "2001:db8:9::1"]

    answers = [_telegram(telegram_bot, "{}", secret="guessed", REMOTE_ADDR=addr) for addr in sources]

    assert [a.status_code for a in answers] == [401, 401, 429, 429, 401]
    counts = dict(InboundRefusal.objects.values_list("remote_addr", "count"))
    assert counts == {"2001:db8:1:2::/64": 4, "2001:db8:9::/64": 1}


def test_lark_refuses_a_signed_push_whose_timestamp_is_stale_and_takes_a_fresh_one(signed_lark_bot):
    push = {"schema": "2.0", "header": {"event_id": "e1", "event_type": "im.chat.updated_v1",
                                        "token": VERIFICATION_TOKEN}, "event": {}}  # fmt: skip
    body = json.dumps(encrypt(push)).encode()

    stale = _post(signed_lark_bot, body, headers=sign(body, timestamp=str(int(time.time()) - 6 * 60)))
    future = _post(signed_lark_bot, body, headers=sign(body, timestamp=str(int(time.time()) + 6 * 60)))
    fresh = _post(signed_lark_bot, body, headers=sign(body))

    assert (stale.status_code, future.status_code, fresh.status_code) == (401, 401, 200)
    assert list(InboundRefusal.objects.values_list("reason", "count")) == [("replayed", 2)]


def test_lark_refuses_a_bad_signature_before_reading_the_body(signed_lark_bot, caplog):
    deep = ("[" * 100_000 + "]" * 100_000).encode()

    answer = _post(signed_lark_bot, deep, headers=sign(deep, key="not-the-key"))

    assert answer.status_code == 401
    assert InboundRefusal.objects.get().message == "the Lark signature does not match"
    assert _tracebacks(caplog) == []


def test_the_retention_sweep_removes_refusals_last_seen_before_the_retention(telegram_bot, settings):
    settings.LANGBOT_RETENTION_INBOUND_REFUSAL_DAYS = 30
    now = timezone.now()
    old = InboundRefusal.objects.create(
        workspace=telegram_bot.workspace, bot=telegram_bot, platform="telegram", reason="forged",
        remote_addr="10.0.0.1", window_start=now - timedelta(days=40), last_at=now - timedelta(days=31), count=9,
    )  # fmt: skip
    recent = InboundRefusal.objects.create(
        workspace=telegram_bot.workspace, bot=telegram_bot, platform="telegram", reason="forged",
        remote_addr="10.0.0.1", window_start=now - timedelta(days=35), last_at=now - timedelta(days=29), count=3,
    )  # fmt: skip

    retention_sweep(now=now)

    assert list(InboundRefusal.objects.values_list("pk", flat=True)) == [recent.pk]
    purge = RetentionPurge.objects.get(kind=RetentionPurge.Kind.INBOUND_REFUSALS)
    assert (purge.workspace_id, purge.count) == (telegram_bot.workspace_id, 1)
    assert old.pk not in InboundRefusal.objects.values_list("pk", flat=True)


def test_the_admin_lists_refusals_with_their_count(telegram_bot, settings):
    settings.LANGBOT_INBOUND_REFUSALS_PER_WINDOW = 50
    for _ in range(37):
        _telegram(telegram_bot, "{}", secret="guessed")
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))

    page = client.get("/admin/platforms/inboundrefusal/")

    assert page.status_code == 200
    assert b'<td class="field-count">37</td>' in page.content
