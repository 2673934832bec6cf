"""How a reply in a group points at the message it answers (`delivery_policy.group_reply`), watched on the
platforms' fakes: `quote` replies to the message (Telegram's reply, a Slack thread, a Discord reference,
Lark's reply API, OneBot's reply segment), `plain` posts a message of its own, `mention` posts one that
starts by @-mentioning the sender; a private chat is answered the same whatever the setting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from bindings.policies import GroupReply
from platforms.adapters.discord import DiscordAdapter
from platforms.adapters.lark import LarkAdapter
from platforms.adapters.onebot import OneBotAdapter
from platforms.adapters.slack import SlackAdapter
from platforms.delivery import PlatformDeliveryPort, group_reply_target
from platforms.interface import PlatformAdapter, ReplyTarget
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, WorkspaceFactory
from tests.fakes.discord_server import TOKEN as DISCORD_TOKEN
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.lark_server import APP_ID, APP_SECRET, FakeLark
from tests.fakes.onebot_http_server import ACCESS_TOKEN, FakeOneBotHTTP
from tests.fakes.platform_http import serving
from tests.fakes.slack_server import BOT_TOKEN as SLACK_TOKEN
from tests.fakes.slack_server import SIGNING_SECRET, FakeSlack
from tests.platforms.conftest import post_update

MENTION = "@langbot_test_bot"


@pytest.fixture(autouse=True)
def fast_pace(settings: Any) -> None:
    settings.LANGBOT_PLATFORM_EDIT_INTERVAL = 0.01


@pytest.fixture
async def _close_thread_connections() -> AsyncIterator[None]:
    yield
    # The async ORM's thread keeps a connection, which would hold the test database open at its teardown.
    await sync_to_async(connections.close_all)()


@sync_to_async
def _telegram_run(fake: Any, telegram_bot_for: Any, group_reply: str, *, group: bool) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True, "group_reply": group_reply})
    bot = telegram_bot_for(workspace)
    if group:
        update = fake.message_update(
            f"{MENTION} hi",
            chat_id=-100900,
            chat_type="supergroup",
            entities=[{"type": "mention", "offset": 0, "length": len(MENTION)}],
        )
    else:
        update = fake.message_update("hi", chat_id=4242)
    assert post_update(bot, update).status_code == 200
    return Run.objects.get(bot=bot)


async def _reply(run: Run, *texts: str) -> None:
    """Stream `texts` as deltas, then complete with all of them: the reply is sent and then edited."""
    port = PlatformDeliveryPort()
    for text in texts:
        port.results_observe(
            run=run, events=[RunEvent(type="message.delta", data={"chunk": {"content": text}})], ended=False
        )
        await asyncio.sleep(0.05)
    completed = RunEvent(type="message.completed", data={"message": {"role": "assistant", "content": "".join(texts)}})
    port.results_observe(run=run, events=[completed], ended=True)
    await port.wait_idle()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_close_thread_connections")
@pytest.mark.parametrize(
    ("group_reply", "quoted", "text"),
    [("quote", True, "Hello there"), ("plain", False, "Hello there"), ("mention", False, "@ada Hello there")],
)
async def test_a_telegram_group_reply_quotes_stands_alone_or_mentions_the_sender_as_the_binding_says(
    fake_telegram, telegram_bot_for, group_reply, quoted, text
):
    run = await _telegram_run(fake_telegram, telegram_bot_for, group_reply, group=True)

    await _reply(run, "Hello ", "there")

    (send,) = fake_telegram.calls_of("sendMessage")
    assert ("reply_parameters" in send.params) is quoted
    # The mention stays through the streamed edits: the final text still starts with it.
    assert fake_telegram.texts(-100900) == [text]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_close_thread_connections")
async def test_a_private_chat_reply_is_the_same_whatever_the_group_setting(fake_telegram, telegram_bot_for):
    run = await _telegram_run(fake_telegram, telegram_bot_for, "mention", group=False)

    await _reply(run, "Hello")

    (send,) = fake_telegram.calls_of("sendMessage")
    assert "reply_parameters" not in send.params
    assert fake_telegram.texts(4242) == ["Hello"]


def _group_event(*, actor_id: str, message_id: str, metadata: dict[str, Any] | None = None) -> Any:
    """What `group_reply_target` reads of an EventLog row."""
    return SimpleNamespace(
        data={"chat_type": "group"},
        subject={"subject_type": "message", "subject_id": message_id},
        actor={"actor_id": actor_id, "metadata": metadata or {}},
    )


def _send(adapter: PlatformAdapter, target: ReplyTarget, event: Any, mode: GroupReply, text: str) -> None:
    async def go() -> None:
        try:
            where, lead = group_reply_target(adapter, target, event, mode)
            await adapter.send_text(where, lead + text)
        finally:
            await adapter.aclose()

    asyncio.run(go())


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with serving(FakeSlack()) as fake:
        yield fake


def test_slack_quotes_in_the_messages_thread_posts_plainly_to_the_channel_and_mentions_unescaped(slack):
    credentials = {"bot_token": SLACK_TOKEN, "signing_secret": SIGNING_SECRET, "api_base_url": f"{slack.origin}/api"}
    adapter = SlackAdapter(bot_id="b", credentials=credentials, allow_private=True)
    event = _group_event(actor_id="U0ADA", message_id="1700000000.000100")
    # The Slack adapter's target for a channel message: its thread is the message itself.
    target = ReplyTarget(chat_id="C1", thread_id="1700000000.000100")

    _send(adapter, target, event, GroupReply.QUOTE, "quoted")
    _send(
        SlackAdapter(bot_id="b", credentials=credentials, allow_private=True), target, event, GroupReply.PLAIN, "a <b>"
    )
    _send(
        SlackAdapter(bot_id="b", credentials=credentials, allow_private=True), target, event, GroupReply.MENTION, "hi"
    )

    quote, plain, mention = (c.params for c in slack.calls_of("chat.postMessage"))
    assert quote.get("thread_ts") == "1700000000.000100"
    assert not plain.get("thread_ts")
    assert plain["text"] == "a &lt;b&gt;"  # the reply's own text is still escaped
    assert not mention.get("thread_ts")
    assert mention["text"] == "<@U0ADA> hi"


def test_slack_keeps_a_plain_reply_in_the_thread_the_message_was_written_in(slack):
    credentials = {"bot_token": SLACK_TOKEN, "signing_secret": SIGNING_SECRET, "api_base_url": f"{slack.origin}/api"}
    adapter = SlackAdapter(bot_id="b", credentials=credentials, allow_private=True)
    event = _group_event(actor_id="U0ADA", message_id="1700000000.000200")

    _send(adapter, ReplyTarget(chat_id="C1", thread_id="1700000000.000100"), event, GroupReply.PLAIN, "in thread")

    (plain,) = (c.params for c in slack.calls_of("chat.postMessage"))
    assert plain.get("thread_ts") == "1700000000.000100"


def test_discord_quotes_with_a_reference_and_mentions_the_sender_only(monkeypatch):
    with serving(FakeDiscord()) as discord:
        credentials = {"token": DISCORD_TOKEN, "api_base_url": discord.api_base_url}
        event = _group_event(actor_id="4242", message_id="777")
        target = ReplyTarget(chat_id="100000000000000001", reply_to_message_id="777")

        for mode in (GroupReply.QUOTE, GroupReply.PLAIN, GroupReply.MENTION):
            _send(DiscordAdapter(bot_id="d", credentials=credentials, allow_private=True), target, event, mode, "hi")

        quote, plain, mention = (c.body for c in discord.calls_of("POST /channels/{id}/messages"))
    assert quote["message_reference"]["message_id"] == "777"
    assert "message_reference" not in plain
    assert "message_reference" not in mention
    assert mention["content"] == "<@4242> hi"
    assert mention["allowed_mentions"] == {"parse": [], "users": ["4242"]}
    assert plain["allowed_mentions"] == {"parse": [], "users": []}


def test_lark_quotes_through_the_reply_api_and_mentions_by_open_id():
    with serving(FakeLark()) as lark:
        lark.message_event("hi", chat_id="oc_group", chat_type="group", message_id="om_1")  # the message answered
        credentials = {"app_id": APP_ID, "app_secret": APP_SECRET, "api_base_url": lark.origin}
        event = _group_event(actor_id="ou_ada", message_id="om_1", metadata={"open_id": "ou_ada"})
        target = ReplyTarget(chat_id="oc_group", reply_to_message_id="om_1")

        for mode in (GroupReply.QUOTE, GroupReply.MENTION):
            _send(LarkAdapter(bot_id="l", credentials=credentials, allow_private=True), target, event, mode, "hi")

        replies = lark.calls_of("message.reply")
        creates = lark.calls_of("message.create")
        texts = lark.texts("oc_group")
    assert len(replies) == 1
    assert len(creates) == 1
    assert texts == ["hi", "<at id=ou_ada></at> hi"]


def test_onebot_quotes_with_a_reply_segment_and_mentions_with_an_at_segment():
    with serving(FakeOneBotHTTP()) as onebot:
        credentials = {"access_token": ACCESS_TOKEN, "api_base_url": onebot.origin}
        event = _group_event(actor_id="20002", message_id="5000")
        target = ReplyTarget(chat_id="group:30003", reply_to_message_id="5000")

        for mode in (GroupReply.QUOTE, GroupReply.PLAIN, GroupReply.MENTION):
            _send(OneBotAdapter(bot_id="o", credentials=credentials, allow_private=True), target, event, mode, "hi")

        quote, plain, mention = (segments for _chat, segments in onebot.sent)
    assert quote[0] == {"type": "reply", "data": {"id": "5000"}}
    assert [s["type"] for s in plain] == ["text"]
    assert mention == [{"type": "at", "data": {"qq": "20002"}}, {"type": "text", "data": {"text": " hi"}}]


def test_a_sender_the_platform_cannot_mention_is_quoted_instead():
    telegram_user_without_username = _group_event(actor_id="31337", message_id="9")
    target = ReplyTarget(chat_id="-100900", reply_to_message_id="9")
    from platforms.adapters.telegram import TelegramAdapter

    adapter = TelegramAdapter(bot_id="t", credentials={"token": "1:x"}, allow_private=True)

    assert group_reply_target(adapter, target, telegram_user_without_username, GroupReply.MENTION) == (target, "")
