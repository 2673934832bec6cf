"""WeChat Official Accounts end to end on a fake server API: the URL check (GET `echostr` under a SHA-1
signature), plaintext and safe-mode (AES) pushes (forged, stale, foreign and entity-laden ones refused; a
plaintext body under a signature already seen with another body refused; a redelivered message handled
once; events acknowledged), a run ending within WeChat's window answered passively as the push's own XML
(sealed in safe mode) and sent nowhere else, a later one through the customer-service API on an access
token bought again once WeChat calls it expired, images in, the credential schema checked on save, and no
body making the webhook answer 500."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from artifacts.models import Artifact
from bindings.models import Bot
from platforms.adapters import wechat_oa
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.platform_http import serving
from tests.fakes.wechat_oa_server import (
    ACCOUNT,
    APP_ID,
    APP_SECRET,
    ENCODING_AES_KEY,
    TOKEN,
    FakeWeChatOA,
    seal,
    sha1_of,
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
def fake_oa() -> Iterator[FakeWeChatOA]:
    with serving(FakeWeChatOA()) as fake:
        yield fake


@pytest.fixture
def oa_bot_for(fake_oa: FakeWeChatOA) -> Callable[..., Bot]:
    def make(workspace: Any, *, safe: bool = False, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="wechat_oa",
            credentials={
                "app_id": APP_ID,
                "app_secret": APP_SECRET,
                "token": TOKEN,
                **({"encoding_aes_key": ENCODING_AES_KEY} if safe else {}),
                "api_base_url": fake_oa.origin,
                **credentials,
            },
        )

    return make


@pytest.fixture
def bot(workspace: Any, oa_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return oa_bot_for(workspace)


@pytest.fixture
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests that do not drive a run's reply need not wait out WeChat's whole window.
    monkeypatch.setattr(wechat_oa, "PASSIVE_WINDOW_SECONDS", 0.2)


def webhook_url(bot: Bot) -> str:
    return f"/platforms/wechat_oa/{bot.workspace.slug}/{bot.bot_id}/webhook"


def post_push(bot: Bot, plain_xml: str, *, safe: bool = False, **sign: Any) -> Any:
    body, query = FakeWeChatOA.push(plain_xml, safe=safe, **sign)
    return Client().post(f"{webhook_url(bot)}?{query}", data=body, content_type="text/xml")


# -- inbound ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_url_check_answers_the_echostr_and_a_forged_one_is_refused(bot):
    answer = Client().get(webhook_url(bot), {**signed_query(), "echostr": "6543210987"})
    forged = Client().get(webhook_url(bot), {**signed_query(token="guessed"), "echostr": "6543210987"})

    assert (answer.status_code, answer.content) == (200, b"6543210987")
    assert forged.status_code == 401


@pytest.mark.django_db
@pytest.mark.usefixtures("short_window")
def test_a_plaintext_message_becomes_one_event_however_often_it_is_posted(bot, fake_oa):
    plain = fake_oa.message_xml("hello <there> & you", openid="oUser-ada")

    first = post_push(bot, plain)
    again = post_push(bot, plain)

    assert (first.status_code, first.content) == (200, b"success")  # nothing replied in the window
    assert (again.status_code, again.content) == (200, b"success")
    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "hello <there> & you"
    assert event.conversation_id == f"bot:{bot.bot_id}:oUser-ada"
    assert Run.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("short_window")
def test_a_safe_mode_message_is_decrypted(workspace, oa_bot_for, fake_oa):
    AgentBindingFactory.create(workspace=workspace)
    safe_bot = oa_bot_for(workspace, safe=True)

    answer = post_push(safe_bot, fake_oa.message_xml("加密的消息"), safe=True)
    plaintext = post_push(safe_bot, fake_oa.message_xml("not sealed"))

    assert answer.status_code == 200
    assert (EventLog.objects.get().input or {}).get("text") == "加密的消息"
    assert plaintext.status_code == 401  # a bot set up for safe mode takes no unsigned plaintext body


@pytest.mark.django_db
def test_a_subscription_is_a_member_event_and_a_location_report_starts_nothing(bot, fake_oa):
    follow = fake_oa.message_xml(None, msg_type="event", extra={"Event": "subscribe"})
    location = fake_oa.message_xml(None, msg_type="event", extra={"Event": "LOCATION", "Latitude": "1"})

    answer = post_push(bot, follow)
    again = post_push(bot, follow)  # WeChat retries a push it did not see answered: one event
    located = post_push(bot, location)

    # No binding answers it here, so the push is answered as WeChat asks for no reply.
    assert (answer.status_code, answer.content) == (200, b"success")
    assert (again.status_code, located.content) == (200, b"success")
    event = EventLog.objects.get()
    assert event.actor is not None
    assert (event.event_type, event.actor["actor_id"], event.data["chat_id"]) == (
        "member.joined",
        "oUser-ada",
        "oUser-ada",
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("short_window")
def test_forged_stale_foreign_replayed_and_entity_laden_pushes_are_refused(workspace, oa_bot_for, fake_oa):
    AgentBindingFactory.create(workspace=workspace)
    plain_bot = oa_bot_for(workspace)
    safe_bot = oa_bot_for(workspace, safe=True)
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><xml><Content>&b;</Content></xml>'
    signed = signed_query()  # one signature, used three times below
    first = fake_oa.message_xml("the real one")

    answers = [
        post_push(plain_bot, fake_oa.message_xml("hi"), token="guessed"),
        post_push(plain_bot, fake_oa.message_xml("hi"), timestamp=1_600_000_000),
        post_push(safe_bot, fake_oa.message_xml("hi"), safe=True, app_id="wxsomeoneelse"),
        Client().post(f"{webhook_url(plain_bot)}?{urlencode(signed)}", data=bomb, content_type="text/xml"),
        Client().post(f"{webhook_url(plain_bot)}?{urlencode(signed)}", data=first, content_type="text/xml"),
        # The same signature with another body: a captured request's query reused.
        Client().post(
            f"{webhook_url(plain_bot)}?{urlencode(signed)}",
            data=fake_oa.message_xml("a forged one"),
            content_type="text/xml",
        ),
        Client().post(webhook_url(plain_bot), data=first, content_type="text/xml"),  # unsigned
    ]

    assert [a.status_code for a in answers] == [401, 401, 401, 400, 200, 401, 401]
    assert [(e.input or {}).get("text") for e in EventLog.objects.all()] == ["the real one"]
    counted: dict[str, int] = {}
    for reason, count in InboundRefusal.objects.values_list("reason", "count"):
        counted[reason] = counted.get(reason, 0) + count
    assert counted == {"forged": 3, "replayed": 2}


@pytest.mark.django_db
@pytest.mark.usefixtures("short_window")
def test_an_image_is_fetched_after_the_answer_and_becomes_an_input_artifact(
    bot, fake_oa, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    fake_oa.media["media-1"] = ("image/jpeg", b"\xff\xd8\xff a photo")
    image = fake_oa.message_xml(
        None, msg_type="image", extra={"PicUrl": "https://mmbiz.qpic.cn/x", "MediaId": "media-1"}
    )

    with django_capture_on_commit_callbacks(execute=True):
        assert post_push(bot, image).status_code == 200
        assert not fake_oa.calls_of("media.get")

    (ref,) = (EventLog.objects.get().input or {})["attachments"]
    stored = Artifact.objects.get(artifact_id=ref["artifact_id"])
    assert (stored.mime_type, stored.size) == ("image/jpeg", len(b"\xff\xd8\xff a photo"))


def test_ctx_delivery_says_what_an_official_account_supports():
    oa = surface_delivery("wechat_oa")
    assert (oa.supports_edit, oa.supports_reaction, oa.max_message_size) == (False, False, 2048)


xml_texts = st.sampled_from(
    [
        "",
        "<xml/>",
        "<xml><MsgType>text</MsgType></xml>",
        "<xml><MsgType>image</MsgType><FromUserName>a</FromUserName><MsgId>1</MsgId></xml>",
        "<xml><CreateTime>1e999</CreateTime><MsgType>text</MsgType><FromUserName>a</FromUserName><MsgId>3</MsgId>"
        "<Content>hi</Content></xml>",
        "<xml><Encrypt>bm90IHJlYWxseQ==</Encrypt></xml>",
        "not xml at all",
        '<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><xml><Content>&e;</Content></xml>',
    ]
)


@pytest.mark.django_db
@pytest.mark.usefixtures("short_window")
def test_no_push_sealed_or_not_makes_the_webhook_answer_500(workspace, oa_bot_for, caplog, settings):
    settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS = 10**9
    bots = {False: oa_bot_for(workspace), True: oa_bot_for(workspace, safe=True)}
    client = Client()

    @fuzz_settings(max_examples=60)
    @given(
        inner=xml_texts
        | st.text(max_size=40)
        | st.dictionaries(st.text(max_size=5), st.text(max_size=5)).map(json.dumps),
        safe=st.booleans(),
        signed=st.booleans(),
        method=st.sampled_from(["GET", "POST"]),
    )
    def never_a_server_error(inner: str, safe: bool, signed: bool, method: str) -> None:
        caplog.clear()
        query = signed_query(token=TOKEN if signed else "guessed")
        url = webhook_url(bots[safe])
        if method == "GET":
            answer = client.get(url, {**query, "echostr": inner})
        elif safe:
            encrypted = seal(inner.encode("utf-8", "surrogatepass"))
            query |= {
                "encrypt_type": "aes",
                "msg_signature": sha1_of(TOKEN, query["timestamp"], query["nonce"], encrypted),
            }
            body = f"<xml><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
            answer = client.post(f"{url}?{urlencode(query)}", data=body, content_type="text/xml")
        else:
            query["nonce"] = str(abs(hash(inner)))  # one body per signature
            answer = client.post(
                f"{url}?{urlencode(query)}", data=inner.encode("utf-8", "surrogatepass"), content_type="text/xml"
            )
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


# -- credentials ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    missing = api_client.post(
        "/api/v1/bots", {"bot_id": "oa", "platform": "wechat_oa", "credentials": {"app_id": APP_ID}}, format="json"
    )
    made = api_client.post(
        "/api/v1/bots",
        {
            "bot_id": "oa",
            "platform": "wechat_oa",
            "credentials": {"app_id": APP_ID, "app_secret": APP_SECRET, "token": TOKEN},
        },
        format="json",
    )

    assert missing.status_code == 400
    assert set(missing.json()["error"]["details"]["fields"]) == {"credentials.app_secret", "credentials.token"}
    assert made.status_code == 201, made.content
    assert (
        "app_secret" not in json.dumps(made.json()).replace('"app_secret"', "")
        or APP_SECRET not in made.content.decode()
    )
    assert APP_SECRET not in made.content.decode()


# -- replies ----------------------------------------------------------------------------------------


def _post_in_thread(bot: Bot, plain_xml: str, *, safe: bool) -> tuple[threading.Thread, dict[str, Any]]:
    """The push posted from another thread, as WeChat waits for the answer while the run goes on."""
    box: dict[str, Any] = {}

    def post() -> None:
        box["answer"] = post_push(bot, plain_xml, safe=safe)

    thread = threading.Thread(target=post)
    thread.start()
    return thread, box


async def _run_of(bot: Bot) -> Run:
    for _ in range(400):  # the webhook's thread makes it; bounded so a broken webhook fails the test
        run = await Run.objects.filter(bot=bot).afirst()
        if run is not None:
            return run
        await asyncio.sleep(0.025)
    raise AssertionError("the push made no run")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("safe", [False, True])
async def test_a_run_that_ends_in_the_window_is_the_pushs_passive_reply_and_is_sent_nowhere_else(
    fake_oa, oa_bot_for, safe
):
    workspace = await sync_to_async(WorkspaceFactory.create)()
    await sync_to_async(AgentBindingFactory.create)(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = await sync_to_async(oa_bot_for)(workspace, safe=safe)
    thread, box = _post_in_thread(bot, fake_oa.message_xml("hi", openid="oUser-ada"), safe=safe)

    run = await _run_of(bot)
    await _deliver(PlatformDeliveryPort(), run, ([_completed("你好，ada & co <3")], 0))
    await asyncio.to_thread(thread.join)

    answer = box["answer"]
    assert answer.status_code == 200
    reply = FakeWeChatOA.open_reply(answer.content, safe=safe)
    assert reply["Content"] == "你好，ada & co <3"
    assert (reply["ToUserName"], reply["FromUserName"], reply["MsgType"]) == ("oUser-ada", ACCOUNT, "text")
    assert not fake_oa.sent  # not through the API as well
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_later_reply_goes_through_the_customer_service_api_on_a_token_bought_again_once_expired(
    fake_oa, oa_bot_for, monkeypatch
):
    monkeypatch.setattr(wechat_oa, "PASSIVE_WINDOW_SECONDS", 0.2)
    workspace = await sync_to_async(WorkspaceFactory.create)()
    await sync_to_async(AgentBindingFactory.create)(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = await sync_to_async(oa_bot_for)(workspace)
    for openid in ("oUser-ada", "oUser-bo"):
        answer = await sync_to_async(post_push)(bot, fake_oa.message_xml("hi", openid=openid))
        assert answer.content == b"success"  # the window passed with no reply
    runs = [run async for run in Run.objects.filter(bot=bot).order_by("pk")]

    await _deliver(PlatformDeliveryPort(), runs[0], ([_completed("one")], 0))
    fake_oa.expire_tokens()
    await _deliver(PlatformDeliveryPort(), runs[1], ([_completed("two " * 700)], 0))

    assert fake_oa.texts("oUser-ada") == ["one"]
    later = fake_oa.texts("oUser-bo")
    assert len(later) >= 2
    assert all(len(t.encode()) <= 2048 for t in later)  # split at 2,048 bytes
    assert [c.errcode for c in fake_oa.calls_of("message.custom.send")][:3] == [0, 42001, 0]
    assert len(fake_oa.calls_of("token")) == 2
    for run in runs:
        assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"
