"""Property-based test of every platform's webhook route (hypothesis, through Django's test client and
the real adapters): whatever body arrives — bytes, any JSON, the platform's own update with any part
replaced by any JSON value, bodies nested thousands deep — with the platform's credentials right or
wrong, the answer is never a 500 and nothing is logged at ERROR or with a traceback."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from bindings.models import Bot
from tests.factories import AgentBindingFactory, BotFactory
from tests.fakes.lark_server import ENCRYPT_KEY, VERIFICATION_TOKEN
from tests.fakes.lark_server import encrypt as lark_encrypt
from tests.fakes.lark_server import sign as lark_sign
from tests.fakes.slack_server import SIGNING_SECRET
from tests.fakes.slack_server import sign as slack_sign
from tests.fuzzing import fuzz_settings

TELEGRAM_SECRET = "webhook-secret-1"
ONEBOT_TOKEN = "onebot-access-token-1"

# Text that has broken hosts before: NUL and a lone surrogate (unstorable in PostgreSQL), long, astral.
tricky_text = st.sampled_from(["\x00", "a\x00b", "\ud800", "x" * 5000, "\U0001f4a5", "/start@other_bot", "<@U0BOT>"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([10**400, -1, 0, 2**63])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | tricky_text
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
deep_bodies = st.sampled_from(
    ["[" * 3000 + "]" * 3000, '{"a":' * 3000 + "1" + "}" * 3000, '{"message":' + "[" * 200 + "]" * 200 + "}"]
)

_NOW = 1_700_000_000
TELEGRAM_UPDATE = {
    "update_id": 7,
    "message": {
        "message_id": 1, "date": _NOW, "text": "/start hello", "chat": {"id": -100, "type": "group", "title": "G"},
        "from": {"id": 31337, "is_bot": False, "first_name": "Ada", "username": "ada"},
        "entities": [{"type": "bot_command", "offset": 0, "length": 6}],
        "photo": [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1, "file_size": 3}],
        "reply_to_message": {"message_id": 0, "date": _NOW, "chat": {"id": -100, "type": "group"},
                             "from": {"id": 123, "is_bot": True, "first_name": "Bot"}},
    },
}  # fmt: skip
SLACK_EVENT = {
    "type": "event_callback", "event_id": "Ev1", "team_id": "T1", "event_time": _NOW,
    "authorizations": [{"is_bot": True, "user_id": "U0BOT"}],
    "event": {"type": "app_mention", "user": "U0ADA", "text": "<@U0BOT> hi", "ts": "1700000000.000100",
              "channel": "C1", "channel_type": "channel",
              "files": [{"id": "F1", "name": "a.txt", "mimetype": "text/plain", "size": 3,
                         "url_private_download": "https://files.slack.com/a.txt"}]},
}  # fmt: skip
LARK_EVENT = {
    "schema": "2.0",
    "header": {"event_id": "e1", "event_type": "im.message.receive_v1", "create_time": "1700000000000",
               "token": VERIFICATION_TOKEN},
    "event": {
        "sender": {"sender_id": {"open_id": "ou_ada"}, "sender_type": "user"},
        "message": {"message_id": "om_1", "chat_id": "oc_1", "chat_type": "group", "message_type": "post",
                    "create_time": "1700000000000", "mentions": [{"key": "@_user_1", "id": {"open_id": "ou_bot"}}],
                    "content": json.dumps({"zh_cn": {"title": "T", "content": [[{"tag": "at", "user_id": "ou_bot",
                                           "user_name": "bot"}, {"tag": "text", "text": " hi"},
                                           {"tag": "img", "image_key": "img_1"}]]}})},
    },
}  # fmt: skip
ONEBOT_EVENT = {
    "post_type": "message", "message_type": "group", "self_id": 10001, "user_id": 20002, "group_id": 30003,
    "message_id": 4, "time": _NOW, "sender": {"nickname": "Ada", "card": ""},
    "message": [{"type": "at", "data": {"qq": "10001"}}, {"type": "text", "data": {"text": " hi"}},
                {"type": "image", "data": {"file": "a.png", "url": "https://x/a.png", "file_size": "12"}},
                {"type": "reply", "data": {"id": "3"}}],
}  # fmt: skip


def _replaced(base: Any, path: list[int], value: Any) -> Any:
    """`base` with the part that `path` picks (each step an index into a list or the keys of an object)
    replaced by `value`."""
    if not path or not isinstance(base, dict | list) or not base:
        return value
    if isinstance(base, dict):
        key = list(base)[path[0] % len(base)]
        return {**base, key: _replaced(base[key], path[1:], value)}
    index = path[0] % len(base)
    return [*base[:index], _replaced(base[index], path[1:], value), *base[index + 1 :]]


def _bodies(base: dict[str, Any]) -> st.SearchStrategy[Any]:
    """What one request carries: bytes as they come, or JSON (any value, or the platform's update with one
    part replaced) — JSON as a Python value, so the platforms that seal it can seal it first."""
    mutated = st.builds(_replaced, st.just(base), st.lists(st.integers(0, 20), max_size=5), json_values)
    return st.binary(max_size=64) | deep_bodies | json_values | mutated | st.just(base)


def _raw(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str) and body[:1] in "[{":
        return body.encode()  # a deep body, already JSON text
    return json.dumps(body).encode("utf-8", "surrogatepass")


def _telegram(body: Any, valid: bool) -> tuple[bytes, dict[str, str]]:
    return _raw(body), {"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET if valid else "guessed"}


def _slack(body: Any, valid: bool) -> tuple[bytes, dict[str, str]]:
    raw = _raw(body)
    return raw, slack_sign(raw, secret=SIGNING_SECRET if valid else "not-the-secret")


def _lark_plain(body: Any, valid: bool) -> tuple[bytes, dict[str, str]]:
    if not valid and isinstance(body, dict) and isinstance(body.get("header"), dict):
        body = {**body, "header": {**body["header"], "token": "guessed"}}
    return _raw(body), {}


def _lark_sealed(body: Any, valid: bool) -> tuple[bytes, dict[str, str]]:
    raw = _raw(body) if isinstance(body, bytes) else json.dumps(lark_encrypt(body)).encode()
    return raw, lark_sign(raw, key=ENCRYPT_KEY if valid else "not-the-key")


def _onebot(body: Any, valid: bool) -> tuple[bytes, dict[str, str]]:
    return _raw(body), {"Authorization": f"Bearer {ONEBOT_TOKEN if valid else 'guessed'}"}


RequestOf = Callable[[Any, bool], tuple[bytes, dict[str, str]]]
# name -> (Bot.platform, credentials, a real-shaped update, how the platform sends a body)
PLATFORMS: dict[str, tuple[str, dict[str, Any], dict[str, Any], RequestOf]] = {
    "telegram": ("telegram", {"token": "123:abc", "secret_token": TELEGRAM_SECRET, "username": "the_bot"},
                 TELEGRAM_UPDATE, _telegram),
    "slack": ("slack", {"bot_token": "xoxb-1", "signing_secret": SIGNING_SECRET}, SLACK_EVENT, _slack),
    "lark": ("lark", {"app_id": "cli_a", "app_secret": "s", "verification_token": VERIFICATION_TOKEN,
                      "bot_open_id": "ou_bot"}, LARK_EVENT, _lark_plain),
    "lark-encrypted": ("lark", {"app_id": "cli_a", "app_secret": "s", "verification_token": VERIFICATION_TOKEN,
                                "encrypt_key": ENCRYPT_KEY}, LARK_EVENT, _lark_sealed),
    "onebot": ("qq", {"access_token": ONEBOT_TOKEN}, ONEBOT_EVENT, _onebot),
    "discord": ("discord", {"bot_token": "d"}, {"type": 1}, _telegram),
}  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(PLATFORMS))
def test_no_body_with_or_without_credentials_makes_a_platform_webhook_answer_500(name, workspace, caplog, settings):
    settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS = 10**9  # every example's refusals in one window
    platform, credentials, base, request_of = PLATFORMS[name]
    AgentBindingFactory.create(workspace=workspace)
    bot: Bot = BotFactory.create(workspace=workspace, platform=platform, credentials=credentials)
    url = f"/platforms/{platform}/{workspace.slug}/{bot.bot_id}/webhook"
    client = Client()

    @fuzz_settings(max_examples=60)
    @given(body=_bodies(base), valid=st.booleans())
    def answer_is_never_a_server_error(body: Any, valid: bool) -> None:
        caplog.clear()
        raw, headers = request_of(body, valid)

        answer = client.post(url, data=raw, content_type="application/json", headers=headers)

        assert answer.status_code < 500, answer.content[:300]
        if answer.status_code >= 400:
            assert "error" in answer.json()
        broken = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert broken == []

    answer_is_never_a_server_error()
