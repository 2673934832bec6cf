"""WeCom internal apps end to end on a fake server API: the callback URL check (GET `echostr`, answered
with its plaintext), encrypted and signed message callbacks (a forged signature, a message sealed for
another company, a stale timestamp or XML with entities refused; a redelivered message handled once;
events acknowledged), replies through `message/send` on one access token bought again once WeCom calls it
expired, replies split at WeCom's 2,048 bytes, images in and files out, the credential schema checked on
save, and no body making the webhook answer 500."""

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

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.platform_http import serving
from tests.fakes.wecom_server import (
    AGENT_ID,
    CORP_ID,
    CORP_SECRET,
    ENCODING_AES_KEY,
    TOKEN,
    FakeWeCom,
    seal,
    signed_query,
)
from tests.fuzzing import fuzz_settings
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    fast_pace,
)
from transcripts.models import EventLog


@pytest.fixture
def fake_wecom() -> Iterator[FakeWeCom]:
    with serving(FakeWeCom()) as fake:
        yield fake


@pytest.fixture
def wecom_bot_for(fake_wecom: FakeWeCom) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="wecom",
            credentials={
                "corp_id": CORP_ID,
                "corp_secret": CORP_SECRET,
                "agent_id": str(AGENT_ID),
                "token": TOKEN,
                "encoding_aes_key": ENCODING_AES_KEY,
                "api_base_url": fake_wecom.origin,
                **credentials,
            },
        )

    return make


def webhook_url(bot: Bot) -> str:
    return f"/platforms/wecom/{bot.workspace.slug}/{bot.bot_id}/webhook"


def post_callback(bot: Bot, plain_xml: str, **sign: Any) -> Any:
    body, query = FakeWeCom.callback(plain_xml, **sign)
    return Client().post(f"{webhook_url(bot)}?{query}", data=body, content_type="text/xml")


@pytest.fixture
def bot(workspace: Any, wecom_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return wecom_bot_for(workspace)


# -- inbound ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_url_check_is_answered_with_the_decrypted_echostr_and_a_forged_one_is_refused(bot):
    answer = Client().get(f"{webhook_url(bot)}?{FakeWeCom.url_check('5927782489442352469')}")
    forged = Client().get(f"{webhook_url(bot)}?{FakeWeCom.url_check('5927782489442352469', token='guessed')}")

    assert (answer.status_code, answer.content) == (200, b"5927782489442352469")
    assert answer["Content-Type"].startswith("text/plain")
    assert forged.status_code == 401


@pytest.mark.django_db
def test_other_platforms_webhooks_still_refuse_get(workspace):
    telegram = BotFactory.create(workspace=workspace, platform="telegram", credentials={"token": "1:a"})

    assert Client().get(f"/platforms/telegram/{workspace.slug}/{telegram.bot_id}/webhook").status_code == 405


@pytest.mark.django_db
def test_a_text_message_becomes_one_event_however_often_it_is_posted_and_is_answered_empty(bot, fake_wecom):
    plain = fake_wecom.message_xml("hello <there> & you", user="ada", msg_id="7100000000000000001")

    first = post_callback(bot, plain)
    again = post_callback(bot, plain)

    assert (first.status_code, first.content) == (200, b"")  # no passive reply: the answer goes by the API
    assert again.status_code == 200
    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "hello <there> & you"
    assert (event.actor or {}).get("actor_id") == "ada"
    assert event.conversation_id == f"bot:{bot.bot_id}:ada"
    assert event.data["raw"]["MsgId"] == "7100000000000000001"
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_events_are_acknowledged_and_start_nothing(bot, fake_wecom):
    enter = fake_wecom.message_xml(None, msg_type="event", extra={"Event": "enter_agent", "EventKey": ""})

    assert post_callback(bot, enter).status_code == 200
    assert not EventLog.objects.exists()


@pytest.mark.django_db
def test_forged_foreign_stale_and_entity_laden_callbacks_are_refused(bot, fake_wecom):
    plain = fake_wecom.message_xml("hi")
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
        "<xml><Encrypt>&b;</Encrypt></xml>"
    )

    answers = [
        post_callback(bot, plain, token="guessed"),
        post_callback(bot, plain, receive_id="wwsomeoneelse"),
        post_callback(bot, plain, timestamp=1_600_000_000),
        Client().post(f"{webhook_url(bot)}?{_query_for('x')}", data=bomb, content_type="text/xml"),
        Client().post(webhook_url(bot), data=FakeWeCom.callback(plain)[0], content_type="text/xml"),  # unsigned
    ]

    assert [a.status_code for a in answers] == [401, 401, 401, 400, 401]
    assert not EventLog.objects.exists()
    assert dict(InboundRefusal.objects.values_list("reason", "count")) == {"forged": 3, "replayed": 1}


def _query_for(encrypted: str) -> str:
    return "&".join(f"{k}={v}" for k, v in signed_query(encrypted).items())


@pytest.mark.django_db
def test_an_image_is_fetched_after_the_answer_and_becomes_an_input_artifact(
    bot, fake_wecom, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    fake_wecom.add_media("media-1", "whiteboard.png", "image/png", b"\x89PNG the whiteboard")
    image = fake_wecom.message_xml(
        None, msg_type="image", extra={"PicUrl": "https://wework.qpic.cn/x", "MediaId": "media-1"}
    )

    with django_capture_on_commit_callbacks(execute=True):
        assert post_callback(bot, image).status_code == 200
        assert not fake_wecom.calls_of("media.get")  # nothing fetched while WeCom waits

    (ref,) = (EventLog.objects.get().input or {})["attachments"]
    stored = Artifact.objects.get(artifact_id=ref["artifact_id"])
    assert (stored.name, stored.mime_type, stored.size) == (
        "whiteboard.png",
        "image/png",
        len(b"\x89PNG the whiteboard"),
    )


def test_ctx_delivery_says_what_wecom_supports():
    wecom = surface_delivery("wecom")
    assert (wecom.supports_edit, wecom.supports_reaction, wecom.max_message_size) == (False, False, 2048)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
xml_texts = st.sampled_from(
    [
        "",
        "<xml/>",
        "<xml><MsgType>text</MsgType></xml>",
        "<xml><MsgType>image</MsgType><FromUserName>a</FromUserName><MsgId>1</MsgId></xml>",
        "<xml><MsgType>text</MsgType><FromUserName>a</FromUserName><MsgId>2</MsgId><Content>\x01</Content></xml>",
        "<xml><CreateTime>1e999</CreateTime><MsgType>text</MsgType><FromUserName>a</FromUserName><MsgId>3</MsgId>"
        "<Content>hi</Content></xml>",
        "not xml at all",
        '<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><xml><Content>&e;</Content></xml>',
    ]
)


@pytest.mark.django_db
def test_no_callback_sealed_or_not_makes_the_webhook_answer_500(bot, caplog, settings):
    settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS = 10**9
    client = Client()

    @fuzz_settings(max_examples=60)
    @given(
        inner=xml_texts | st.text(max_size=40) | json_values.map(json.dumps),
        sealed=st.booleans(),
        signed=st.booleans(),
        method=st.sampled_from(["GET", "POST"]),
    )
    def never_a_server_error(inner: str, sealed: bool, signed: bool, method: str) -> None:
        caplog.clear()
        encrypted = seal(inner.encode("utf-8", "surrogatepass")) if sealed else inner
        query = signed_query(encrypted, token=TOKEN if signed else "guessed")
        if method == "GET":
            answer = client.get(webhook_url(bot), {**query, "echostr": encrypted})
        else:
            body = f"<xml><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>".encode("utf-8", "surrogatepass")
            answer = client.post(f"{webhook_url(bot)}?{_query(query)}", data=body, content_type="text/xml")
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


def _query(values: dict[str, str]) -> str:
    from urllib.parse import urlencode

    return urlencode(values)


# -- credentials ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    complete = {
        "corp_id": CORP_ID,
        "corp_secret": CORP_SECRET,
        "agent_id": AGENT_ID,  # a number, as the console shows it, is taken too
        "token": TOKEN,
        "encoding_aes_key": ENCODING_AES_KEY,
    }
    missing = api_client.post(
        "/api/v1/bots",
        {"bot_id": "wc", "platform": "wecom", "credentials": {"corp_id": CORP_ID, "agent_id": 1.5}},
        format="json",
    )
    made = api_client.post(
        "/api/v1/bots", {"bot_id": "wc", "platform": "wecom", "credentials": complete}, format="json"
    )
    moved = api_client.patch("/api/v1/bots/wc", {"platform": "dingtalk"}, format="json")

    assert missing.status_code == 400
    fields = missing.json()["error"]["details"]["fields"]
    assert set(fields) == {
        "credentials.corp_secret",
        "credentials.token",
        "credentials.encoding_aes_key",
        "credentials.agent_id",
    }
    assert fields["credentials.agent_id"] == "Must be a string or integer."
    assert made.status_code == 201, made.content
    assert moved.status_code == 400  # WeCom's credentials are not a DingTalk bot's
    assert Bot.objects.get().platform == "wecom"


# -- delivery ---------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeWeCom, wecom_bot_for: Callable[..., Bot], user: str = "ada") -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = wecom_bot_for(workspace)
    assert post_callback(bot, fake.message_xml("hi", user=user)).status_code == 200
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_replies_go_through_message_send_on_one_token_bought_again_once_it_expired(fake_wecom, wecom_bot_for):
    first = await _platform_run(fake_wecom, wecom_bot_for, user="ada")
    await _deliver(PlatformDeliveryPort(), first, ([_completed("one")], 0))
    second = await _platform_run(fake_wecom, wecom_bot_for, user="bo")
    await _deliver(PlatformDeliveryPort(), second, ([_completed("two")], 0))
    fake_wecom.expire_tokens()
    third = await _platform_run(fake_wecom, wecom_bot_for, user="ada")
    await _deliver(PlatformDeliveryPort(), third, ([_completed("three")], 0))

    assert fake_wecom.texts("ada") == ["one", "three"]
    assert fake_wecom.texts("bo") == ["two"]
    assert [c.errcode for c in fake_wecom.calls_of("message.send")] == [0, 0, 42001, 0]
    assert len(fake_wecom.calls_of("gettoken")) == 2
    assert {s.agentid for s in fake_wecom.sent} == {AGENT_ID}
    for run in (first, second, third):
        assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_long_chinese_reply_is_split_under_wecoms_2048_bytes(fake_wecom, wecom_bot_for):
    run = await _platform_run(fake_wecom, wecom_bot_for)
    reply = "这是一个很长的回答，每一句话都不一样长。" * 300  # 6,000 characters, 18,000 bytes

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    texts = fake_wecom.texts("ada")
    assert len(texts) >= 9
    assert all(len(t.encode()) <= 2048 for t in texts)
    assert "".join(texts).replace(" ", "") == reply
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_an_image_the_run_created_is_uploaded_and_sent_after_the_text(fake_wecom, wecom_bot_for):
    run = await _platform_run(fake_wecom, wecom_bot_for)
    artifact = await sync_to_async(artifact_create_from_bytes)(
        workspace=await sync_to_async(lambda: run.workspace)(),
        data=b"\x89PNG\r\n\x1a\n a chart",
        name="chart.png",
        mime_type="image/png",
        conversation_id=run.conversation_id,
        source=Artifact.Source.RUNNER,
    )
    created = RunEvent(type="artifact.created", data={"artifact_id": str(artifact.artifact_id), "name": "chart.png"})

    await _deliver(PlatformDeliveryPort(), run, ([created, _completed("here is the chart")], 0))

    text, image = fake_wecom.sent
    assert (text.msgtype, text.text) == ("text", "here is the chart")
    assert image.msgtype == "image"
    assert fake_wecom.media[image.content["media_id"]][2] == b"\x89PNG\r\n\x1a\n a chart"
    assert fake_wecom.calls_of("media.upload")[0].query["type"] == "image"
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"
