"""KOOK bots on a fake KOOK (HTTP API v3 and its WebSocket gateway): channel messages become events with
`data.mentioned` saying whether they @-mention the bot (the default trigger filter answers only those),
direct messages are private chats, the bot's own and other bots' messages are ignored, system events become
the pinned event types; PINGs carry the last `sn`; a dropped connection resumes and gets the events it
missed, once; a RECONNECT starts a new session; frames of the wrong shape are ignored without dropping the
connection and the webhook route refuses without a 500; a streamed reply is one KMarkdown message quoting
the question, updated as it grows; direct replies go to the direct-message API; a 429 is waited out;
reactions; the credential schema; and end to end through the connector process, a worker and the
qa-runner."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.core.cache import cache
from django.test import Client

from bindings.models import Bot
from platforms.adapters.kook import KookAdapter, KookConnector
from platforms.connectors import connection_label, connection_statuses, connectors_serve
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import PlatformAPIError, PlatformFileRef, ReplyTarget, SentMessage
from platforms.models import PlatformDelivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.kook_server import BOT_USER_ID, CHANNEL_ID, GUILD_ID, TOKEN, USER_ID, FakeKook
from tests.fakes.platform_http import serving
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    _delta,
    fast_pace,
)
from tests.platforms.test_telegram_e2e import _delivery as _delivery_of
from tests.platforms.test_telegram_e2e import _run_of
from transcripts.models import EventLog


@pytest.fixture
def fake_kook() -> Iterator[FakeKook]:
    with serving(FakeKook()) as fake:
        yield fake


@pytest.fixture
def kook_bot_for(fake_kook: FakeKook) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="kook",
            credentials={"token": TOKEN, "api_base_url": fake_kook.api_base_url, **credentials},
        )

    return make


@pytest.fixture
def fast_connector(monkeypatch: Any) -> None:
    monkeypatch.setattr(KookConnector, "reconnect_first_delay", 0.2)
    monkeypatch.setattr(KookConnector, "ping_interval", 0.3)
    monkeypatch.setattr(KookConnector, "pong_timeout", 0.5)


@pytest.fixture
async def connectors(fast_connector: None) -> AsyncIterator[None]:
    """The connector process's loop, run in this test's loop."""
    await database_sync_to_async(cache.clear)()
    stop = asyncio.Event()
    task = asyncio.create_task(connectors_serve(stop=stop, rescan_seconds=0.2))
    yield
    stop.set()
    await asyncio.wait_for(task, 10)


async def _until(check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := await database_sync_to_async(check)()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return found


def _events(count: int) -> Callable[[], list[EventLog] | None]:
    return lambda: list(EventLog.objects.order_by("id")) if EventLog.objects.count() >= count else None


async def _connected_bot(kook_bot_for: Callable[..., Bot], fake: FakeKook) -> Bot:
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    bot = await database_sync_to_async(kook_bot_for)(workspace)
    await asyncio.to_thread(fake.wait_connected)
    return bot


# -- the gateway ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_channel_messages_say_whether_they_mention_the_bot_and_only_those_and_direct_ones_start_runs(
    fake_kook, kook_bot_for, connectors
):
    bot = await _connected_bot(kook_bot_for, fake_kook)
    own = fake_kook.message("my own answer", author_id=BOT_USER_ID, bot=True)
    other_bot = fake_kook.message("beep", author_id="9999", bot=True)
    chatter = fake_kook.message("people talking")
    mention = fake_kook.message(f"(met){BOT_USER_ID}(met) summarise", mention=[BOT_USER_ID])
    direct = fake_kook.message("hello there", channel_type="PERSON")
    for event in (own, other_bot, chatter, mention, direct):
        fake_kook.send_event(event)

    events = await _until(_events(2))
    assert [(e.input["text"], e.data["mentioned"], e.data["chat_type"]) for e in events] == [
        ("summarise", True, "group"),
        ("hello there", True, "private"),
    ]
    # The chatter says it does not address the bot; no binding answers it, so the gateway keeps no record.
    adapter = KookAdapter(bot_id="k", credentials={})
    said = adapter.event_update(chatter, bot_user_id=BOT_USER_ID)
    assert said is not None
    assert (said.envelope["input"]["text"], said.envelope["data"]["mentioned"]) == ("people talking", False)
    assert events[0].data["reply_target"] == {
        "chat_id": CHANNEL_ID,
        "reply_to_message_id": mention["msg_id"],
        "extra": {"kind": "channel"},
    }
    assert events[1].data["reply_target"] == {"chat_id": USER_ID, "extra": {"kind": "direct"}}
    assert events[0].event_id == f"kook:{bot.bot_id}:{mention['msg_id']}"
    # The default trigger filter answers the mention and the direct message, not the chatter.
    runs = await _until(lambda: list(Run.objects.select_related("event")) if Run.objects.count() >= 2 else None)
    assert sorted(r.event.input["text"] for r in runs) == ["hello there", "summarise"]
    await asyncio.sleep(0.5)  # past a ping interval
    assert fake_kook.pings[-1:] == [5]  # the last event's sn
    label = await database_sync_to_async(lambda: connection_label(connection_statuses([bot]).get(bot.pk)))()
    assert label == "connected"
    assert await EventLog.objects.acount() == 2


@pytest.mark.django_db(transaction=True)
async def test_system_events_become_the_pinned_event_types(fake_kook, kook_bot_for, connectors):
    await _connected_bot(kook_bot_for, fake_kook)
    target = "6f1a2b3c-0000-4000-8000-000000000999"
    for name, body, channel_type in (
        ("joined_guild", {"user_id": USER_ID, "joined_at": 1}, "GROUP"),
        ("exited_guild", {"user_id": USER_ID, "exited_at": 2}, "GROUP"),
        (
            "added_reaction",
            {"channel_id": CHANNEL_ID, "msg_id": target, "user_id": USER_ID, "emoji": {"id": "👍", "name": "👍"}},
            "GROUP",
        ),
        (
            "deleted_reaction",
            {"channel_id": CHANNEL_ID, "msg_id": target, "user_id": USER_ID, "emoji": {"id": "👍", "name": "👍"}},
            "GROUP",
        ),
        (
            "updated_message",
            {"channel_id": CHANNEL_ID, "msg_id": target, "content": f"(met){BOT_USER_ID}(met) fixed", "mention": []},
            "GROUP",
        ),
        ("deleted_message", {"channel_id": CHANNEL_ID, "msg_id": target}, "GROUP"),
        (
            "message_btn_click",
            {"msg_id": target, "user_id": USER_ID, "value": "yes", "target_id": CHANNEL_ID},
            "PERSON",
        ),
        ("self_joined_guild", {"guild_id": GUILD_ID}, "GROUP"),
        ("guild_member_online", {"user_id": USER_ID}, "GROUP"),  # not a pinned type: nothing
    ):
        fake_kook.send_event(fake_kook.system(name, body, channel_type=channel_type))

    events = await _until(_events(8))
    await asyncio.sleep(0.3)
    assert await EventLog.objects.acount() == 8
    assert [e.event_type for e in events] == [
        "member.joined",
        "member.left",
        "reaction.added",
        "reaction.removed",
        "message.edited",
        "message.recalled",
        "card.clicked",
        "bot.added",
    ]
    by_type = {e.event_type: e for e in events}
    assert by_type["member.joined"].actor["actor_id"] == USER_ID
    assert by_type["reaction.added"].data["reaction"] == "👍"
    assert by_type["reaction.added"].data["target_message_id"] == target
    assert (by_type["message.edited"].input["text"], by_type["message.edited"].data["mentioned"]) == ("fixed", True)
    assert by_type["message.recalled"].data["target_message_id"] == target
    assert by_type["card.clicked"].data["action"] == "yes"
    assert by_type["bot.added"].data["chat_id"] == GUILD_ID


@pytest.mark.django_db(transaction=True)
async def test_a_dropped_connection_resumes_and_gets_the_events_it_missed_once(fake_kook, kook_bot_for, connectors):
    await _connected_bot(kook_bot_for, fake_kook)
    fake_kook.send_event(fake_kook.message("before", channel_type="PERSON"))
    await _until(_events(1))

    fake_kook.drop()
    fake_kook.send_event(fake_kook.message("while away", channel_type="PERSON"))  # kept for the resume
    await asyncio.to_thread(fake_kook.wait_connected)
    fake_kook.send_event(fake_kook.message("after", channel_type="PERSON"))

    events = await _until(_events(3))
    await asyncio.sleep(0.3)
    assert [e.input["text"] for e in events] == ["before", "while away", "after"]
    assert await EventLog.objects.acount() == 3
    assert (fake_kook.hellos, fake_kook.resumes) == (1, [1])


@pytest.mark.django_db(transaction=True)
async def test_a_reconnect_signal_or_unanswered_pings_start_the_connection_over(fake_kook, kook_bot_for, connectors):
    await _connected_bot(kook_bot_for, fake_kook)
    fake_kook.send_event(fake_kook.message("one", channel_type="PERSON"))
    await _until(_events(1))

    fake_kook.ask_reconnect()
    await asyncio.to_thread(fake_kook.wait_connected)
    assert fake_kook.hellos == 2  # a new session, not a resume
    fake_kook.send_event(fake_kook.message("two", channel_type="PERSON"))  # sn 1 of the new session
    await _until(_events(2))

    fake_kook.answer_pings = False
    await asyncio.to_thread(fake_kook.wait_connected)  # closed for want of a pong, resumed
    assert fake_kook.resumes == [1]


@pytest.mark.django_db(transaction=True)
async def test_frames_of_the_wrong_shape_are_ignored_and_the_connection_stays(fake_kook, kook_bot_for, connectors):
    bot = await _connected_bot(kook_bot_for, fake_kook)
    fake_kook.send_raw("not json {")
    fake_kook.send_raw("[1, 2, 3]")
    fake_kook.send_event({"type": "many", "msg_id": "x"})
    fake_kook.send_event({"type": 9, "msg_id": ["a list"], "extra": {}})
    fake_kook.send_event({**fake_kook.message("x"), "extra": "a string"})
    fake_kook.send_event(fake_kook.message("still here", channel_type="PERSON"))

    (event,) = await _until(_events(1))
    assert event.input["text"] == "still here"
    assert (fake_kook.hellos, fake_kook.resumes) == (1, [])
    # KOOK events come over the gateway: the webhook route refuses, without a 500.
    response = await asyncio.to_thread(
        Client().post, f"/platforms/kook/{bot.workspace.slug}/{bot.bot_id}/webhook", b"{}", "application/json"
    )
    assert response.status_code == 404


# -- delivery ---------------------------------------------------------------------------------------


@database_sync_to_async
def _platform_run(bot_for: Callable[..., Bot], fake: FakeKook, **message: Any) -> Run:
    """A run of a KOOK message, as the connector would have accepted it."""
    from platforms.inbound import platform_update_accept

    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = bot_for(workspace)
    adapter = KookAdapter(bot_id=bot.bot_id, credentials=bot.credentials)
    update = adapter.event_update(fake.message("hi", **message), bot_user_id=BOT_USER_ID)
    assert update is not None
    platform_update_accept(bot=bot, update=update)
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_streamed_reply_is_one_kmarkdown_message_quoting_the_question_updated_as_it_grows(
    fake_kook, kook_bot_for
):
    run = await _platform_run(kook_bot_for, fake_kook, mention=[BOT_USER_ID])
    words = [f"word{i} " for i in range(12)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.03) for w in words], ([_completed("".join(words).strip())], 0.03)
    )

    assert fake_kook.texts(CHANNEL_ID) == ["".join(words).strip()]
    writes = fake_kook.calls_of("/message/create", "/message/update")
    assert writes[0].path == "/message/create"
    question = await EventLog.objects.aget(pk=run.event_id)
    assert (writes[0].body["type"], writes[0].body["quote"]) == (
        9,
        question.data["reply_target"]["reply_to_message_id"],
    )
    assert {w.path for w in writes[1:]} == {"/message/update"}
    assert 2 <= len(writes) < len(words)
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_direct_reply_goes_to_the_direct_message_api_after_a_429_is_waited_out(fake_kook, kook_bot_for):
    run = await _platform_run(kook_bot_for, fake_kook, channel_type="PERSON")
    fake_kook.rate_limit_next("/direct-message/create", 1)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("hello in private")], 0))

    assert fake_kook.texts(USER_ID) == ["hello in private"]
    calls = fake_kook.calls_of("/direct-message/create")
    assert [c.status for c in calls] == [429, 200]
    assert calls[1].at - calls[0].at >= 0.95
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


def test_reactions_edits_files_and_identity_on_the_api(fake_kook):
    adapter = KookAdapter(bot_id="k", credentials={"token": TOKEN, "api_base_url": fake_kook.api_base_url})
    url = fake_kook.add_file("notes.pdf", b"%PDF-1.7\n")

    async def use() -> tuple[SentMessage, Any, str]:
        try:
            sent = await adapter.send_text(ReplyTarget(chat_id=USER_ID, extra={"kind": "direct"}), "hi")
            await adapter.add_reaction(sent, "👍")
            await adapter.add_reaction(SentMessage(chat_id=CHANNEL_ID, message_id="m1"), "🎉")
            fetched = await adapter.fetch_file(PlatformFileRef(ref={"url": url}, name="notes.pdf"))
            off_kook = PlatformFileRef(ref={"url": "https://example.org/evil.pdf"}, name="x")
            with pytest.raises(PlatformAPIError, match="not on KOOK's file hosts"):
                await adapter.fetch_file(off_kook)
            return sent, fetched, await adapter.identity()
        finally:
            await adapter.aclose()

    sent, fetched, line = async_to_sync(use)()

    assert fake_kook.calls_of("/direct-message/add-reaction")[0].body == {"msg_id": sent.message_id, "emoji": "👍"}
    assert fake_kook.calls_of("/message/add-reaction")[0].body == {"msg_id": "m1", "emoji": "🎉"}
    assert fetched.data == b"%PDF-1.7\n"
    assert "langbot#4242" in line


def test_an_api_base_url_on_an_internal_address_is_refused_unless_the_workspace_allows_it(fake_kook):
    credentials = {"token": TOKEN, "api_base_url": fake_kook.api_base_url}
    guarded = KookAdapter(bot_id="k", credentials=credentials, allow_private=False)
    with pytest.raises(PlatformAPIError, match="refused"):
        async_to_sync(guarded.send_text)(ReplyTarget(chat_id=CHANNEL_ID), "hi")
    assert not fake_kook.calls


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    missing = api_client.post(
        "/api/v1/bots", {"bot_id": "k1", "platform": "kook", "name": "K", "credentials": {}}, format="json"
    )
    unknown = api_client.post(
        "/api/v1/bots",
        {"bot_id": "k2", "platform": "kook", "name": "K", "credentials": {"token": "t", "verify_token": "v"}},
        format="json",
    )
    fine = api_client.post(
        "/api/v1/bots", {"bot_id": "k3", "platform": "kook", "name": "K", "credentials": {"token": "t"}}, format="json"
    )

    assert missing.status_code == 400
    assert set(missing.json()["error"]["details"]["fields"]) == {"credentials.token"}
    assert unknown.status_code == 400
    assert set(unknown.json()["error"]["details"]["fields"]) == {"credentials.verify_token"}
    assert fine.status_code == 201, fine.json()


def test_ctx_delivery_says_what_kook_supports():
    caps = KookAdapter.capabilities
    assert (caps.edit, caps.reaction, caps.files_out) == (True, True, False)
    assert caps.actions == ("message.send", "message.edit", "reaction.add")
    assert {"member.joined", "card.clicked"} <= set(caps.event_types)


# -- the connector process with a real worker and the qa-runner ---------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_direct_message_on_the_gateway_is_answered_with_a_reply_that_grows_by_updates(
    worker, qa_binding, kook_bot_for, fake_kook, celery_queue
):
    from tests.processes import REPO_ROOT, _host_env

    bot = kook_bot_for(qa_binding().workspace)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_connectors", "--rescan", "1"],
        cwd=REPO_ROOT,
        env=_host_env(celery_queue),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        fake_kook.wait_connected(timeout=30)
        fake_kook.send_event(fake_kook.message("qa:type:1.5 hello", channel_type="PERSON"))

        run = _run_of(bot)
        assert run.status == Run.Status.COMPLETED
        assert _delivery_of(run).status == "delivered"
        assert fake_kook.texts(USER_ID) == [run.output]
        writes = fake_kook.calls_of("/direct-message/create", "/direct-message/update")
        assert writes[0].body["content"] != run.output  # the first write showed the reply still growing
        assert {w.path for w in writes[1:]} == {"/direct-message/update"}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
