"""The website chat widget's HTTP side: its script, and sessions issued only to the sites a web bot allows, with
signed visitor tokens bound to bot and visitor, and rate limits per address."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import signing
from django.test import Client

from bindings.models import Bot
from tests.factories import BotFactory, WorkspaceFactory
from webchat.widget import (
    Visitor,
    origin_normalized,
    visitor_from_token,
    visitor_token,
    widget_public_id,
    widget_ticket_consume,
)

pytestmark = pytest.mark.django_db

SITE = "https://shop.example.com"


@pytest.fixture(autouse=True)
def _fresh_limits(settings):
    # Each test counts from zero: a cache of its own per test (the counters live in the cache).
    from django.core.cache import cache

    cache.clear()
    settings.LANGBOT_WIDGET_NEW_VISITORS_PER_IP_HOUR = 20
    settings.LANGBOT_WIDGET_SESSIONS_PER_IP_MINUTE = 60


def _bot(**fields: Any) -> Bot:
    fields.setdefault("allowed_origins", [SITE])
    return BotFactory.create(workspace=WorkspaceFactory.create(), **fields)


def _session(bot_or_id: Bot | str, *, origin: str | None = SITE, ip: str = "203.0.113.7", **body: Any) -> Any:
    widget_id = bot_or_id if isinstance(bot_or_id, str) else widget_public_id(bot_or_id)
    headers: dict[str, Any] = {"HTTP_ORIGIN": origin} if origin else {}
    return Client().post(
        f"/widget/{widget_id}/session", data=body, content_type="application/json", REMOTE_ADDR=ip, **headers
    )


def test_the_script_is_served_to_any_site_with_caching_and_revalidation():
    client = Client()
    response = client.get("/widget.js", HTTP_ORIGIN="https://anywhere.example")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    assert response["Access-Control-Allow-Origin"] == "*"
    assert response["Cross-Origin-Resource-Policy"] == "cross-origin"
    assert "max-age=" in response["Cache-Control"]
    assert b"attachShadow" in response.content
    again = client.get("/widget.js", HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304


def test_an_allowed_site_gets_a_visitor_token_and_a_ticket_with_cors_for_it_alone():
    bot = _bot(name="Shop help")

    response = _session(bot)

    assert response.status_code == 201
    assert response["Access-Control-Allow-Origin"] == SITE
    assert "Access-Control-Allow-Credentials" not in response
    body = response.json()
    visitor = visitor_from_token(bot, body["token"])
    assert body["conversation_id"] == f"widget:{bot.bot_id}:{visitor.visitor_id}"
    assert body["ws_path"] == f"/ws/v1/widget/?ticket={body['ticket']}"
    assert body["title"] == "Shop help"
    grant = widget_ticket_consume(ticket=body["ticket"])
    assert grant is not None
    assert (grant.bot_pk, grant.visitor_id, grant.origin) == (bot.pk, visitor.visitor_id, SITE)
    assert widget_ticket_consume(ticket=body["ticket"]) is None, "a ticket opens one socket"


def test_the_preflight_is_answered_for_allowed_sites_only():
    bot = _bot()
    url = f"/widget/{widget_public_id(bot)}/session"
    headers: dict[str, Any] = {
        "HTTP_ACCESS_CONTROL_REQUEST_METHOD": "POST",
        "HTTP_ACCESS_CONTROL_REQUEST_HEADERS": "content-type",
    }

    allowed = Client().options(url, HTTP_ORIGIN=SITE, **headers)
    refused = Client().options(url, HTTP_ORIGIN="https://evil.example", **headers)

    assert allowed.status_code == 204
    assert allowed["Access-Control-Allow-Origin"] == SITE
    assert "content-type" in allowed["Access-Control-Allow-Headers"].lower()
    assert refused.status_code == 403
    assert "Access-Control-Allow-Origin" not in refused


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example",
        "http://shop.example.com",  # another scheme
        "https://shop.example.com:8443",  # another port
        "https://shop.example.com.evil.example",
        None,  # no browser page at all
        "null",  # a sandboxed frame or a file
    ],
)
def test_a_site_outside_the_list_gets_no_session(origin):
    response = _session(_bot(), origin=origin)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "widget.origin_refused"
    assert "Access-Control-Allow-Origin" not in response


def test_an_empty_list_turns_the_widget_off():
    response = _session(_bot(allowed_origins=[]))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "widget.origin_refused"


@pytest.mark.parametrize(
    "case", ["made-up id", "disabled bot", "telegram bot", "truncated id", "workspace slug and bot id"]
)
def test_only_an_enabled_web_bots_widget_id_opens_a_session(case):
    bot = _bot(enabled=case != "disabled bot", platform="telegram" if case == "telegram bot" else "webui")
    widget_id = {
        "made-up id": "w" + "a" * 26,
        "truncated id": widget_public_id(bot)[:-1],
        "workspace slug and bot id": f"{bot.workspace.slug}.{bot.bot_id}",
    }.get(case, widget_public_id(bot))

    response = _session(widget_id)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "widget.not_found"


def test_the_widget_id_names_nothing_of_the_bot():
    bot = _bot()
    widget_id = widget_public_id(bot)

    assert bot.bot_id not in widget_id
    assert bot.workspace.slug not in widget_id
    assert widget_id != widget_public_id(_bot()), "each bot its own id"
    assert widget_id == widget_public_id(Bot.objects.get(pk=bot.pk)), "the same id every time"


def test_the_widget_id_survives_a_secret_key_rotation_listed_in_fallbacks(settings):
    bot = _bot()
    widget_id = widget_public_id(bot)

    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-new-secret-key-" + "x" * 40, [settings.SECRET_KEY]

    assert _session(widget_id).status_code == 201


def test_a_returning_visitor_keeps_their_identity_and_conversation():
    bot = _bot()
    first = _session(bot).json()

    again = _session(bot, token=first["token"]).json()

    assert again["conversation_id"] == first["conversation_id"]
    assert visitor_from_token(bot, again["token"]) == visitor_from_token(bot, first["token"])


@pytest.mark.parametrize("case", ["forged signature", "another visitor id", "another bot's token", "garbage"])
def test_a_forged_or_foreign_token_is_refused(case):
    bot = _bot()
    other = _bot()
    genuine = _session(bot).json()["token"]
    token = {
        "forged signature": genuine[:-4] + ("AAAA" if not genuine.endswith("AAAA") else "BBBB"),
        # The visitor id of someone else, signed with a key that is not the host's.
        "another visitor id": signing.dumps({"b": bot.pk, "v": "someone-else"}, key="guess", salt="x"),
        "another bot's token": visitor_token(Visitor(other.pk, "v-of-other")),
        "garbage": "not a token",
    }[case]

    response = _session(bot, token=token)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "widget.token_invalid"
    assert response["Access-Control-Allow-Origin"] == SITE, "the widget reads why, and starts over"


def test_an_expired_token_is_refused(settings):
    bot = _bot()
    token = _session(bot).json()["token"]

    settings.LANGBOT_WIDGET_VISITOR_DAYS = -1

    assert _session(bot, token=token).json()["error"]["code"] == "widget.token_invalid"


def test_new_visitors_per_address_per_hour_are_limited(settings):
    settings.LANGBOT_WIDGET_NEW_VISITORS_PER_IP_HOUR = 3
    bot = _bot()

    answers = [_session(bot) for _ in range(4)]
    elsewhere = _session(bot, ip="198.51.100.9")
    returning = _session(bot, token=answers[0].json()["token"])

    assert [a.status_code for a in answers] == [201, 201, 201, 429]
    refused = answers[-1]
    assert refused.json()["error"]["code"] == "widget.rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 3601
    assert refused.json()["retry_after"] == int(refused["Retry-After"])
    assert refused["Access-Control-Allow-Origin"] == SITE
    assert elsewhere.status_code == 201, "another address counts on its own"
    assert returning.status_code == 201, "a returning visitor is no new session"


def test_session_requests_per_address_per_minute_are_limited(settings):
    settings.LANGBOT_WIDGET_SESSIONS_PER_IP_MINUTE = 2
    bot = _bot()
    token = _session(bot).json()["token"]

    assert _session(bot, token=token).status_code == 201
    assert _session(bot, token=token).status_code == 429


@pytest.mark.parametrize("body", [b"[1]", b"{not json", b'{"token": "' + b"x" * 5000 + b'"}'])
def test_a_bad_body_is_a_400_with_a_code(body):
    bot = _bot()

    response = Client().post(
        f"/widget/{widget_public_id(bot)}/session", data=body, content_type="application/json", HTTP_ORIGIN=SITE
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_argument"


def test_the_widgets_words_follow_data_lang():
    bot = _bot()

    chinese = _session(bot, lang="zh-hans").json()
    english = _session(bot, lang="en").json()

    assert chinese["language"] == "zh-hans"
    assert chinese["strings"]["send"] != english["strings"]["send"] == "Send"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://Shop.Example.com", "https://shop.example.com"),
        ("https://shop.example.com:443", "https://shop.example.com"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("https://shop.example.com/path", None),
        ("https://shop.example.com?q=1", None),
        ("ftp://shop.example.com", None),
        ("https://user@shop.example.com", None),
        ("shop.example.com", None),
    ],
)
def test_origins_compare_by_scheme_host_and_port_only(given, expected):
    assert origin_normalized(given) == expected
