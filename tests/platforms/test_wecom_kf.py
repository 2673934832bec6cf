"""WeChat Customer Service end to end on the fake WeCom server: the sealed `kf_msg_or_event` callback makes
the bot pull the waiting messages with `sync_msg` (every page), customers' messages become events and the
corp's human agents' do not, the cursor is kept per bot across requests so a later pull reads only what is
new, a replayed callback makes nothing twice, replies go out with `send_msg` to the customer and account,
`enter_session` becomes `member.joined` answered with its welcome code, and forged callbacks are refused."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from bindings.models import Bot
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformCursor, PlatformDelivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.platform_http import serving
from tests.fakes.wecom_server import CORP_ID, CORP_SECRET, ENCODING_AES_KEY, TOKEN, FakeWeCom
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
def kf_bot_for(fake_wecom: FakeWeCom) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="wecom_kf",
            credentials={
                "corp_id": CORP_ID,
                "kf_secret": CORP_SECRET,
                "token": TOKEN,
                "encoding_aes_key": ENCODING_AES_KEY,
                "api_base_url": fake_wecom.origin,
                **credentials,
            },
        )

    return make


def webhook_url(bot: Bot) -> str:
    return f"/platforms/wecom_kf/{bot.workspace.slug}/{bot.bot_id}/webhook"


def post_callback(bot: Bot, callback: tuple[bytes, str]) -> Any:
    body, query = callback
    return Client().post(f"{webhook_url(bot)}?{query}", data=body, content_type="text/xml")


@pytest.fixture
def bot(workspace: Any, kf_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    return kf_bot_for(workspace)


@pytest.mark.django_db
def test_a_kf_event_pulls_the_customers_messages_and_the_cursor_makes_the_next_pull_read_only_new_ones(bot, fake_wecom):
    first = fake_wecom.kf_message("hello", customer="wmAda")
    fake_wecom.kf_message("an agent's answer", customer="wmAda", origin=5)
    fake_wecom.kf_message("are you there?", customer="wmBo")

    answer = post_callback(bot, fake_wecom.kf_event())
    replayed = post_callback(bot, fake_wecom.kf_event())
    fake_wecom.kf_message("one more", customer="wmAda")
    later = post_callback(bot, fake_wecom.kf_event())

    assert (answer.status_code, answer.content) == (200, b"")
    assert replayed.status_code == later.status_code == 200
    events = list(EventLog.objects.order_by("id"))
    assert [e.input["text"] for e in events] == ["hello", "are you there?", "one more"]
    assert events[0].event_id == f"wecom_kf:{bot.bot_id}:{first['msgid']}"
    assert events[0].data["reply_target"] == {"chat_id": "wmAda", "extra": {"open_kfid": "wkAccount1"}}
    assert events[0].conversation_id == f"bot:{bot.bot_id}:wmAda"
    cursors = [c.body["cursor"] for c in fake_wecom.calls_of("kf.sync_msg")]
    assert cursors == ["", "cur3", "cur3"]  # kept between requests, moved on only by what was read
    assert PlatformCursor.objects.get(bot=bot).value == "cur4"
    assert Run.objects.count() == 3


@pytest.mark.django_db
def test_every_page_of_a_burst_is_pulled_in_one_callback(bot, fake_wecom):
    fake_wecom.kf_page_size = 2
    for index in range(5):
        fake_wecom.kf_message(f"message {index}", customer=f"wm{index}")

    assert post_callback(bot, fake_wecom.kf_event()).status_code == 200

    assert EventLog.objects.count() == 5
    assert len(fake_wecom.calls_of("kf.sync_msg")) == 3


@pytest.mark.django_db
def test_an_item_of_an_undocumented_shape_is_skipped_and_the_pull_goes_on(bot, fake_wecom, caplog):
    fake_wecom.kf_message("before")
    fake_wecom.kf_log += [
        {"msgid": "odd1", "origin": "three", "msgtype": "text", "open_kfid": "wkAccount1", "external_userid": "wmX"},
        {"msgid": "odd2", "origin": 3, "msgtype": "text", "text": "not an object", "open_kfid": "wkAccount1"},
        {"msgtype": "event", "event": ["not", "an", "object"], "open_kfid": "wkAccount1"},
        {"msgid": "odd3", "origin": 3, "msgtype": "text", "text": {"content": {"nested": 1}}, "open_kfid": "wkAccount1",
         "external_userid": "wmY", "send_time": "yesterday"},
    ]  # fmt: skip
    fake_wecom.kf_message("after")

    answer = post_callback(bot, fake_wecom.kf_event())

    assert answer.status_code == 200
    assert [(e.input or {})["text"] for e in EventLog.objects.order_by("id")] == ["before", "after"]
    assert PlatformCursor.objects.get(bot=bot).value == "cur6"  # past the odd items: they are not pulled again
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.django_db
def test_a_recalled_message_is_message_recalled(bot, fake_wecom):
    said = fake_wecom.kf_message("oops", customer="wmEd")
    fake_wecom.kf_log.append(
        {
            "msgid": "kfrecall1",
            "origin": 4,
            "msgtype": "event",
            "event": {
                "event_type": "user_recall_msg",
                "open_kfid": "wkAccount1",
                "external_userid": "wmEd",
                "recall_msgid": said["msgid"],
            },
        }
    )

    assert post_callback(bot, fake_wecom.kf_event()).status_code == 200

    recalled = EventLog.objects.get(event_type="message.recalled")
    assert (recalled.data["target_message_id"], recalled.data["chat_id"]) == (said["msgid"], "wmEd")
    assert (recalled.actor or {})["actor_id"] == "wmEd"


@pytest.mark.django_db
def test_forged_callbacks_are_refused_and_the_url_check_answers_the_echo(bot, fake_wecom):
    fake_wecom.kf_message("hello")

    forged = post_callback(bot, fake_wecom.kf_event(token="not-the-token"))
    check = Client().get(f"{webhook_url(bot)}?{FakeWeCom.url_check('echo-kf')}")

    assert forged.status_code == 401
    assert (check.status_code, check.content) == (200, b"echo-kf")
    assert not fake_wecom.calls_of("kf.sync_msg")
    assert InboundRefusal.objects.get().reason == "forged"


@pytest.mark.django_db(transaction=True)
async def test_a_reply_goes_to_the_customer_through_send_msg(kf_bot_for, fake_wecom):
    @sync_to_async
    def setup() -> Run:
        workspace = WorkspaceFactory.create()
        AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
        bot = kf_bot_for(workspace)
        fake_wecom.kf_message("what are your hours?", customer="wmCy")
        assert post_callback(bot, fake_wecom.kf_event()).status_code == 200
        return Run.objects.get(bot=bot)

    run = await setup()
    await _deliver(PlatformDeliveryPort(), run, ([_completed("Nine to five.")], 0))

    (sent,) = fake_wecom.kf_sent
    assert (sent["route"], sent["touser"], sent["open_kfid"], sent["text"]) == (
        "kf.send_msg",
        "wmCy",
        "wkAccount1",
        {"content": "Nine to five."},
    )
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_entering_the_session_is_member_joined_and_its_greeting_uses_the_welcome_code(kf_bot_for, fake_wecom):
    @sync_to_async
    def setup() -> tuple[Run, str]:
        workspace = WorkspaceFactory.create()
        AgentBindingFactory.create(
            workspace=workspace, delivery_policy={"enable_reply": True}, event_types=["member.joined"]
        )
        bot = kf_bot_for(workspace)
        code = fake_wecom.kf_enter_session(customer="wmDi")
        assert post_callback(bot, fake_wecom.kf_event()).status_code == 200
        return Run.objects.get(bot=bot), code

    run, code = await setup()
    event = await EventLog.objects.aget()
    assert (event.event_type, (event.actor or {})["actor_id"]) == ("member.joined", "wmDi")
    assert "welcome_code" not in event.data["raw"]  # it lets its holder write to the customer once

    await _deliver(PlatformDeliveryPort(), run, ([_completed("Welcome! How can I help?")], 0))

    (sent,) = fake_wecom.kf_sent
    assert (sent["route"], sent["code"], sent["text"]["content"]) == (
        "kf.send_msg_on_event",
        code,
        "Welcome! How can I help?",
    )
