"""QQ through OneBot v11's HTTP mode, beside its reverse WebSocket: events posted to the bot's webhook as
NapCat's or go-cqhttp's HTTP POST reporting sends them, checked by `X-Signature` (HMAC-SHA1 of the body
with the secret: required once the bot has one; checked with the access token when NapCat signs with its
one token), becoming events like the socket's; replies through the implementation's HTTP API
(`send_msg` with the access token as a Bearer), split and quoting the group message they answer; the
implementation refusing the token recorded as a failed delivery; no body making the webhook answer 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from bindings.models import Bot
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.onebot_http_server import ACCESS_TOKEN, GROUP_ID, SECRET, SELF_ID, USER_ID, FakeOneBotHTTP, sign
from tests.fakes.platform_http import serving
from tests.fuzzing import fuzz_settings
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    fast_pace,
)
from transcripts.models import EventLog


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "data": {"text": value}}


def at(qq: int) -> dict[str, Any]:
    return {"type": "at", "data": {"qq": str(qq)}}


@pytest.fixture
def fake_onebot() -> Iterator[FakeOneBotHTTP]:
    with serving(FakeOneBotHTTP()) as fake:
        yield fake


@pytest.fixture
def onebot_bot_for(fake_onebot: FakeOneBotHTTP) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="qq",
            credentials={
                "access_token": ACCESS_TOKEN,
                "secret": SECRET,
                "api_base_url": fake_onebot.origin,
                **credentials,
            },
        )

    return make


def post_event(bot: Bot, body: bytes, headers: dict[str, str]) -> Any:
    url = f"/platforms/qq/{bot.workspace.slug}/{bot.bot_id}/webhook"
    base = {"X-Self-ID": str(SELF_ID), "User-Agent": "OneBot/11"}
    return Client().post(url, data=body, content_type="application/json", headers={**base, **headers})


@pytest.mark.django_db
def test_a_signed_event_becomes_an_event_and_an_unsigned_or_forged_one_is_refused(
    workspace, onebot_bot_for, fake_onebot
):
    AgentBindingFactory.create(workspace=workspace)
    bot = onebot_bot_for(workspace)
    body = fake_onebot.event(text("hello there"))

    forged = post_event(bot, body, {"X-Signature": sign(body, "a-guessed-secret")})
    # With a secret set, the access token alone is not enough: the body must be signed.
    token_only = post_event(bot, body, {"Authorization": f"Bearer {ACCESS_TOKEN}"})
    tampered = post_event(bot, body.replace(b"hello", b"jello"), {"X-Signature": sign(body)})
    genuine = post_event(bot, body, {"X-Signature": sign(body)})
    again = post_event(bot, body, {"X-Signature": sign(body)})

    assert [r.status_code for r in (forged, token_only, tampered)] == [403, 401, 403]
    assert (genuine.status_code, again.status_code) == (200, 200)
    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "hello there"
    assert event.data["chat_id"] == f"private:{USER_ID}"
    assert sum(InboundRefusal.objects.values_list("count", flat=True)) == 3


@pytest.mark.django_db
def test_without_a_secret_napcats_signature_by_its_token_or_the_token_itself_is_taken(
    workspace, onebot_bot_for, fake_onebot
):
    AgentBindingFactory.create(workspace=workspace)
    bot = onebot_bot_for(workspace, secret="")
    signed = fake_onebot.event(text("signed by the token"))
    bearer = fake_onebot.event(text("token in the header"))
    wrong = fake_onebot.event(text("signed by another"))

    assert post_event(bot, signed, {"X-Signature": sign(signed, ACCESS_TOKEN)}).status_code == 200
    assert post_event(bot, bearer, {"Authorization": f"Bearer {ACCESS_TOKEN}"}).status_code == 200
    assert post_event(bot, wrong, {"X-Signature": sign(wrong, "not-the-token")}).status_code == 403
    assert post_event(bot, wrong, {}).status_code == 401

    assert sorted(str((e.input or {}).get("text")) for e in EventLog.objects.all()) == [
        "signed by the token",
        "token in the header",
    ]


@pytest.mark.django_db
def test_a_meta_event_is_acknowledged_and_starts_nothing(workspace, onebot_bot_for):
    bot = onebot_bot_for(workspace)
    heartbeat = json.dumps(
        {"time": 1, "self_id": SELF_ID, "post_type": "meta_event", "meta_event_type": "heartbeat", "interval": 5000}
    ).encode()

    assert post_event(bot, heartbeat, {"X-Signature": sign(heartbeat)}).status_code == 200
    assert not EventLog.objects.exists()


@pytest.mark.django_db
def test_the_secret_is_a_credential_the_save_takes(api_client):
    created = api_client.post(
        "/api/v1/bots",
        {"bot_id": "qqh", "platform": "qq", "credentials": {"access_token": "t", "secret": "s"}},
        format="json",
    )

    assert created.status_code == 201, created.content


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
events = st.fixed_dictionaries(
    {"post_type": st.sampled_from(["message", "notice", 1]), "message_type": st.sampled_from(["private", "group"])},
    optional={
        "self_id": json_values,
        "user_id": json_values,
        "group_id": json_values,
        "message_id": json_values,
        "message": json_values | st.lists(st.fixed_dictionaries({"type": json_values, "data": json_values})),
        "time": json_values,
        "sender": json_values,
    },
)


@pytest.mark.django_db
def test_no_signed_body_makes_the_webhook_answer_500(workspace, onebot_bot_for, caplog):
    bot = onebot_bot_for(workspace)

    @fuzz_settings(max_examples=80)
    @given(body=json_values | events)
    def never_a_server_error(body: Any) -> None:
        caplog.clear()
        raw = json.dumps(body).encode()
        answer = post_event(bot, raw, {"X-Signature": sign(raw)})
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


# -- replies ----------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeOneBotHTTP, onebot_bot_for: Callable[..., Bot], body: bytes, **credentials: Any) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = onebot_bot_for(workspace, **credentials)
    assert post_event(bot, body, {"X-Signature": sign(body)}).status_code == 200
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_group_reply_goes_through_the_http_api_split_and_quoting_the_message(fake_onebot, onebot_bot_for):
    body = fake_onebot.event(at(SELF_ID), text(" summarise"), group=True)
    run = await _platform_run(fake_onebot, onebot_bot_for, body)
    reply = "A sentence of the long answer. " * 200  # 6,200 characters

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    chat = f"group:{GROUP_ID}"
    parts = fake_onebot.texts(chat)
    assert len(parts) == 2
    assert all(len(p) <= 4000 for p in parts)
    assert " ".join(parts) == reply.strip()
    quoted = str(json.loads(body)["message_id"])
    assert all(s[0] == {"type": "reply", "data": {"id": quoted}} for s in fake_onebot.segments(chat))
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_an_access_token_the_implementation_refuses_fails_the_delivery(fake_onebot, onebot_bot_for):
    body = fake_onebot.event(text("hi"))
    run = await _platform_run(fake_onebot, onebot_bot_for, body, access_token="not-the-token")

    await _deliver(PlatformDeliveryPort(), run, ([_completed("never arrives")], 0))

    delivery = await PlatformDelivery.objects.aget(run=run)
    assert delivery.status == "failed"
    assert (delivery.error or {}).get("message") == "OneBot send_msg: HTTP 403 (the access token is refused)"
    assert fake_onebot.sent == []
