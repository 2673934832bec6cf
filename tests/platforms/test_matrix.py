"""Matrix bots on a fake homeserver (the client-server API): the first sync answers no history; an
invitation is accepted and becomes `bot.added`; room messages become events (a room of more than two is a
group, `data.mentioned` saying whether the bot is mentioned; the bot's own messages, notices and encrypted
events are skipped); memberships, reactions, edits and redactions become the pinned event types; the
`since` token is kept per bot, so a restarted connector neither replays nor skips, and a poll whose
connection drops is made again from the same token; junk events are skipped without stopping the sync
and the webhook route refuses without a 500; a streamed reply is one message (a reply to the question)
edited by `m.replace`; a send whose answer was lost is retried as the same transaction, so one message
arrives; reactions, media, the credential schema; and end to end through the connector process, a worker
and the qa-runner."""

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
from platforms.adapters.matrix import MatrixAdapter, MatrixConnector
from platforms.connectors import connectors_serve
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import PlatformFileRef, SentMessage
from platforms.models import PlatformCursor, PlatformDelivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.matrix_server import ACCESS_TOKEN, BOT_USER_ID, DIRECT_ROOM, GROUP_ROOM, USER_ID, FakeMatrix
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
def fake_matrix() -> Iterator[FakeMatrix]:
    with serving(FakeMatrix()) as fake:
        yield fake


@pytest.fixture
def matrix_bot_for(fake_matrix: FakeMatrix) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="matrix",
            credentials={"homeserver_url": fake_matrix.homeserver_url, "access_token": ACCESS_TOKEN, **credentials},
        )

    return make


def _serve() -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(connectors_serve(stop=stop, rescan_seconds=0.2))


@pytest.fixture
async def connectors(monkeypatch: Any) -> AsyncIterator[asyncio.Event]:
    """The connector process's loop, run in this test's loop (stopped early by setting the event)."""
    monkeypatch.setattr(MatrixConnector, "reconnect_first_delay", 0.2)
    monkeypatch.setattr(MatrixConnector, "poll_timeout_ms", 400)
    await database_sync_to_async(cache.clear)()
    stop, task = _serve()
    yield stop
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


async def _syncing_bot(bot_for: Callable[..., Bot], fake: FakeMatrix) -> Bot:
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    bot = await database_sync_to_async(bot_for)(workspace)
    await asyncio.to_thread(fake.wait_syncs, 2)  # the first sync, then the first long poll
    return bot


# -- the sync ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_no_history_invitations_accepted_and_room_messages_with_whether_they_mention_the_bot(
    fake_matrix, matrix_bot_for, connectors
):
    fake_matrix.message(GROUP_ROOM, "said before the bot was there")
    bot = await _syncing_bot(matrix_bot_for, fake_matrix)
    fake_matrix.invite("!new:example.org")
    fake_matrix.message(GROUP_ROOM, "people talking")
    fake_matrix.message(GROUP_ROOM, "langbot: summarise", **{"m.mentions": {"user_ids": [BOT_USER_ID]}})
    fake_matrix.message(DIRECT_ROOM, "hello there")
    fake_matrix.message(GROUP_ROOM, "my own", sender=BOT_USER_ID)
    fake_matrix.event(GROUP_ROOM, "m.room.message", {"msgtype": "m.notice", "body": "another bot"})
    fake_matrix.event(GROUP_ROOM, "m.room.encrypted", {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "x"})

    events = await _until(_events(3))
    await asyncio.sleep(0.5)
    # The chatter says it does not address the bot; no binding answers it, so the gateway keeps no record.
    assert await EventLog.objects.acount() == 3
    added, *messages = events
    assert (added.event_type, added.data["chat_id"], added.actor["actor_id"]) == (
        "bot.added",
        "!new:example.org",
        USER_ID,
    )
    assert fake_matrix.joined == ["!new:example.org"]
    assert [(e.input["text"], e.data["mentioned"], e.data["chat_type"]) for e in messages] == [
        ("summarise", True, "group"),
        ("hello there", True, "private"),
    ]
    chatter = MatrixAdapter(bot_id="m", credentials={}).room_event_update(
        GROUP_ROOM, fake_matrix.timeline[1][1], own_user_id=BOT_USER_ID, group=True
    )
    assert chatter is not None
    assert (chatter.envelope["input"]["text"], chatter.envelope["data"]["mentioned"]) == ("people talking", False)
    question = fake_matrix.timeline[2][1]
    assert messages[0].data["reply_target"] == {
        "chat_id": GROUP_ROOM,
        "reply_to_message_id": question["event_id"],
        "extra": {"answers": question["event_id"]},
    }
    direct = fake_matrix.timeline[3][1]
    assert messages[1].data["reply_target"] == {"chat_id": DIRECT_ROOM, "extra": {"answers": direct["event_id"]}}
    assert messages[0].event_id.startswith(f"matrix:{bot.bot_id}:")
    runs = await _until(lambda: list(Run.objects.select_related("event")) if Run.objects.count() >= 2 else None)
    assert sorted(r.event.input["text"] for r in runs) == ["hello there", "summarise"]


@pytest.mark.django_db(transaction=True)
async def test_memberships_reactions_edits_and_redactions_become_the_pinned_event_types(
    fake_matrix, matrix_bot_for, connectors
):
    await _syncing_bot(matrix_bot_for, fake_matrix)
    mention = {"m.mentions": {"user_ids": [BOT_USER_ID]}}
    target = fake_matrix.message(GROUP_ROOM, "first text", **mention)["event_id"]
    fake_matrix.member(GROUP_ROOM, "@carol:example.org", "join")
    fake_matrix.member(GROUP_ROOM, "@carol:example.org", "join", before="join")  # a profile change: nothing
    fake_matrix.member(GROUP_ROOM, "@carol:example.org", "leave", before="join")
    fake_matrix.reaction(GROUP_ROOM, target, "👍")
    fake_matrix.message(
        GROUP_ROOM,
        "* fixed text",
        **{
            "m.new_content": {"msgtype": "m.text", "body": "fixed text", **mention},
            "m.relates_to": {"rel_type": "m.replace", "event_id": target},
        },
    )
    fake_matrix.redaction(GROUP_ROOM, target)

    events = await _until(_events(6))
    await asyncio.sleep(0.5)
    assert await EventLog.objects.acount() == 6
    assert [e.event_type for e in events] == [
        "message.received",
        "member.joined",
        "member.left",
        "reaction.added",
        "message.edited",
        "message.recalled",
    ]
    _, joined, _, reaction, edited, recalled = events
    assert joined.actor["actor_id"] == "@carol:example.org"
    assert (reaction.data["reaction"], reaction.data["target_message_id"]) == ("👍", target)
    assert (edited.input["text"], edited.data["target_message_id"]) == ("fixed text", target)
    assert recalled.data["target_message_id"] == target


@pytest.mark.django_db(transaction=True)
async def test_the_since_token_is_kept_so_a_dropped_poll_or_a_restart_neither_replays_nor_skips(
    fake_matrix, matrix_bot_for, connectors
):
    bot = await _syncing_bot(matrix_bot_for, fake_matrix)
    fake_matrix.message(DIRECT_ROOM, "one")
    await _until(_events(1))

    fake_matrix.hang_up_after_next("sync")
    polls = len(fake_matrix.syncs)
    await asyncio.to_thread(fake_matrix.wait_syncs, polls + 3)  # the hung-up poll, then polls again
    fake_matrix.message(DIRECT_ROOM, "two")
    await _until(_events(2))
    stored = await database_sync_to_async(lambda: PlatformCursor.objects.get(bot=bot, name="matrix_since").value)()
    assert stored == "s2"

    connectors.set()  # the connector process stops; a message comes meanwhile; a new process starts
    await asyncio.sleep(0.8)
    fake_matrix.message(DIRECT_ROOM, "three")
    restarted_at = len(fake_matrix.syncs)
    stop, task = _serve()
    try:
        events = await _until(_events(3))
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert [e.input["text"] for e in events] == ["one", "two", "three"]
    assert await EventLog.objects.acount() == 3
    assert fake_matrix.syncs[restarted_at].get("since") == "s2"  # no first sync again, no replay


@pytest.mark.django_db(transaction=True)
async def test_junk_events_are_skipped_without_stopping_the_sync(fake_matrix, matrix_bot_for, connectors):
    bot = await _syncing_bot(matrix_bot_for, fake_matrix)
    fake_matrix.raw_event(GROUP_ROOM, "not an event")
    fake_matrix.raw_event(GROUP_ROOM, {"type": "m.room.message", "content": {"body": "no ids"}})
    fake_matrix.raw_event(GROUP_ROOM, {"type": "m.room.message", "event_id": "$x", "sender": USER_ID, "content": "a"})
    fake_matrix.raw_event(
        DIRECT_ROOM, {"type": "m.room.member", "event_id": "$y", "sender": USER_ID, "content": {"membership": "join"}}
    )
    fake_matrix.message(DIRECT_ROOM, "still here")

    (event,) = await _until(_events(1))
    assert event.input["text"] == "still here"
    response = await asyncio.to_thread(
        Client().post, f"/platforms/matrix/{bot.workspace.slug}/{bot.bot_id}/webhook", b"{}", "application/json"
    )
    assert response.status_code == 404


# -- delivery ---------------------------------------------------------------------------------------


@database_sync_to_async
def _platform_run(bot_for: Callable[..., Bot], fake: FakeMatrix, room: str, group: bool) -> Run:
    from platforms.inbound import platform_update_accept

    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = bot_for(workspace)
    adapter = MatrixAdapter(bot_id=bot.bot_id, credentials=bot.credentials)
    message = fake.message(room, f"{BOT_USER_ID}: hi")
    update = adapter.room_event_update(room, message, own_user_id=BOT_USER_ID, group=group)
    assert update is not None
    platform_update_accept(bot=bot, update=update)
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_streamed_reply_is_one_message_answering_the_question_edited_as_it_grows(fake_matrix, matrix_bot_for):
    run = await _platform_run(matrix_bot_for, fake_matrix, GROUP_ROOM, group=True)
    question = fake_matrix.timeline[-1][1]["event_id"]
    words = [f"word{i} " for i in range(12)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.03) for w in words], ([_completed("".join(words).strip())], 0.03)
    )

    assert fake_matrix.texts(GROUP_ROOM) == ["".join(words).strip()]
    first, *edits = fake_matrix.sends()
    assert first.content["m.relates_to"] == {"m.in_reply_to": {"event_id": question}}
    assert {e.content["m.relates_to"]["rel_type"] for e in edits} == {"m.replace"}
    assert {e.content["m.relates_to"]["event_id"] for e in edits} == {first.event_id}
    assert 1 <= len(edits) < len(words)
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_send_whose_answer_was_lost_is_sent_again_as_the_same_transaction_and_arrives_once(
    fake_matrix, matrix_bot_for
):
    run = await _platform_run(matrix_bot_for, fake_matrix, GROUP_ROOM, group=True)
    fake_matrix.hang_up_after_next("send/m.room.message")

    await _deliver(PlatformDeliveryPort(), run, ([_completed("the answer")], 0))

    assert fake_matrix.texts(GROUP_ROOM) == ["the answer"]
    assert len(fake_matrix.sends()) == 1
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_429_is_waited_out_for_retry_after_ms(fake_matrix, matrix_bot_for):
    run = await _platform_run(matrix_bot_for, fake_matrix, DIRECT_ROOM, group=False)
    fake_matrix.rate_limit_next("send/m.room.message", 1000)
    started = time.monotonic()

    await _deliver(PlatformDeliveryPort(), run, ([_completed("in private")], 0))

    assert fake_matrix.texts(DIRECT_ROOM) == ["in private"]
    assert time.monotonic() - started >= 0.95
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


def test_reactions_media_and_identity_on_the_api(fake_matrix):
    credentials = {"homeserver_url": fake_matrix.homeserver_url, "access_token": ACCESS_TOKEN}
    adapter = MatrixAdapter(bot_id="m", credentials=credentials)
    mxc = fake_matrix.add_media("abc123", "notes.pdf", b"%PDF-1.7\n")

    async def use() -> tuple[Any, str]:
        try:
            await adapter.add_reaction(SentMessage(chat_id=GROUP_ROOM, message_id="$target"), "👍")
            fetched = await adapter.fetch_file(PlatformFileRef(ref={"mxc": mxc}, name="notes.pdf"))
            return fetched, await adapter.identity()
        finally:
            await adapter.aclose()

    fetched, line = async_to_sync(use)()

    (reaction,) = fake_matrix.sends("m.reaction")
    assert reaction.content == {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$target", "key": "👍"}}
    assert fetched.data == b"%PDF-1.7\n"
    assert BOT_USER_ID in line


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    wrong = api_client.post(
        "/api/v1/bots",
        {
            "bot_id": "m1",
            "platform": "matrix",
            "name": "M",
            "credentials": {"homeserver_url": "matrix.example.org", "user_id": "langbot"},
        },
        format="json",
    )

    assert wrong.status_code == 400
    assert set(wrong.json()["error"]["details"]["fields"]) == {
        "credentials.homeserver_url",
        "credentials.access_token",
        "credentials.user_id",
    }


# -- the connector process with a real worker and the qa-runner ---------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_direct_message_is_answered_with_a_reply_that_grows_by_edits(
    worker, qa_binding, matrix_bot_for, fake_matrix, celery_queue
):
    from tests.processes import REPO_ROOT, _host_env

    bot = matrix_bot_for(qa_binding().workspace)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_connectors", "--rescan", "1"],
        cwd=REPO_ROOT,
        env=_host_env(celery_queue),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        fake_matrix.wait_syncs(2, timeout=60)
        fake_matrix.message(DIRECT_ROOM, "qa:type:1.5 hello")

        run = _run_of(bot)
        assert run.status == Run.Status.COMPLETED
        assert _delivery_of(run).status == "delivered"
        assert fake_matrix.texts(DIRECT_ROOM) == [run.output]
        first, *edits = fake_matrix.sends()
        assert first.content["body"] != run.output  # the first write showed the reply still growing
        assert edits
        assert {e.content["m.relates_to"]["rel_type"] for e in edits} == {"m.replace"}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
