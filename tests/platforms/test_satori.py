"""Satori bots on a fake Satori server (HTTP API and event socket on one port, as Koishi's server plugin
serves them): IDENTIFY with the token, messages of the bot's login become events (message elements read as
text, `<at>` of the bot making `data.mentioned` true, images as files) and those of another login on the
same server do not; events beyond messages become the pinned types; the last `sn` is kept per bot so a
restarted connector asks for what it missed and gets it once; a dropped socket reconnects; frames of the
wrong shape are ignored without dropping the connection and the webhook route refuses without a 500; a
streamed reply is one message (quoting the question, escaped) updated as it grows, with the login's
headers; reactions; the credential schema; and end to end through the connector process, a worker and the
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

from artifacts.models import Artifact
from bindings.models import Bot
from platforms.adapters.satori import SatoriAdapter, SatoriConnector
from platforms.connectors import connectors_serve
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import PlatformFileRef, SentMessage
from platforms.models import PlatformCursor, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.satori_server import (
    CHANNEL_ID,
    DIRECT_CHANNEL,
    OTHER_SELF_ID,
    PLATFORM,
    SELF_ID,
    TOKEN,
    USER_ID,
    FakeSatori,
)
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
def fake_satori() -> Iterator[FakeSatori]:
    with FakeSatori() as fake:
        yield fake


def _credentials(fake: FakeSatori, **extra: Any) -> dict[str, Any]:
    return {"endpoint": fake.endpoint, "token": TOKEN, "platform": PLATFORM, "self_id": SELF_ID, **extra}


@pytest.fixture
def satori_bot_for(fake_satori: FakeSatori) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace, platform="satori", credentials=_credentials(fake_satori, **credentials)
        )

    return make


@pytest.fixture
async def connectors(monkeypatch: Any) -> AsyncIterator[asyncio.Event]:
    """The connector process's loop, run in this test's loop (stopped early by setting the event)."""
    monkeypatch.setattr(SatoriConnector, "reconnect_first_delay", 0.2)
    monkeypatch.setattr(SatoriConnector, "ping_interval", 0.3)
    await database_sync_to_async(cache.clear)()
    stop = asyncio.Event()
    task = asyncio.create_task(connectors_serve(stop=stop, rescan_seconds=0.2))
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


async def _connected_bot(bot_for: Callable[..., Bot], fake: FakeSatori) -> Bot:
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    bot = await database_sync_to_async(bot_for)(workspace)
    await asyncio.to_thread(fake.wait_connected)
    return bot


# -- the event socket -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_messages_of_the_bots_login_become_events_with_elements_read_as_text(
    fake_satori, satori_bot_for, connectors, monkeypatch
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)  # the files' task, inline
    bot = await _connected_bot(satori_bot_for, fake_satori)
    assert fake_satori.identifies == [{"token": TOKEN}]
    image = fake_satori.add_file("chart.png", b"\x89PNG")
    for body in (
        fake_satori.message_created("people &amp; chatter"),
        fake_satori.message_created(f'<at id="{SELF_ID}" name="langbot"/> summarise <at id="7" name="bob"/>'),
        fake_satori.message_created(f'look<img src="{image}"/>', direct=True),
        fake_satori.message_created("to the other bot", self_id=OTHER_SELF_ID),
        fake_satori.message_created("my own", user={"id": SELF_ID, "name": "langbot"}),
    ):
        fake_satori.send_event(body)

    events = await _until(_events(2))
    await asyncio.sleep(0.3)
    # The chatter says it does not address the bot; no binding answers it, so the gateway keeps no record.
    assert await EventLog.objects.acount() == 2
    assert [(e.input.get("text"), e.data["mentioned"], e.data["chat_type"]) for e in events] == [
        ("summarise @bob", True, "group"),
        ("look", True, "private"),
    ]
    chatter = SatoriAdapter(bot_id="s", credentials=_credentials(fake_satori)).event_update(
        fake_satori.message_created("people &amp; chatter")
    )
    assert chatter is not None
    assert (chatter.envelope["input"]["text"], chatter.envelope["data"]["mentioned"]) == ("people & chatter", False)
    assert events[0].data["reply_target"]["chat_id"] == CHANNEL_ID
    assert events[1].data["reply_target"] == {"chat_id": DIRECT_CHANNEL}
    assert events[0].event_id.startswith(f"satori:{bot.bot_id}:m")
    (artifact,) = await database_sync_to_async(lambda: list(Artifact.objects.filter(workspace=bot.workspace)))()
    assert [a["artifact_id"] for a in events[1].input["attachments"]] == [str(artifact.artifact_id)]
    assert (artifact.name, artifact.size) == ("chart.png", 4)
    runs = await _until(lambda: list(Run.objects.select_related("event")) if Run.objects.count() >= 2 else None)
    assert sorted(r.event.input.get("text") for r in runs) == ["look", "summarise @bob"]


@pytest.mark.django_db(transaction=True)
async def test_events_beyond_messages_become_the_pinned_event_types(fake_satori, satori_bot_for, connectors):
    await _connected_bot(satori_bot_for, fake_satori)
    target = {"id": "m-old", "content": f'<at id="{SELF_ID}"/> fixed text'}
    for kind, fields in (
        ("guild-member-added", {}),
        ("guild-member-removed", {}),
        ("guild-added", {"user": {"id": SELF_ID}}),
        ("message-updated", {"message": target}),
        ("message-deleted", {"message": {"id": "m-old"}}),
        ("reaction-added", {"message": {"id": "m-old"}, "emoji": {"id": "1", "name": "thumbsup"}}),
        ("interaction/button", {"button": {"id": "approve"}}),
        ("friend-request", {}),  # no pinned type: nothing
    ):
        fake_satori.send_event(fake_satori.event(kind, **fields))

    events = await _until(_events(7))
    await asyncio.sleep(0.3)
    assert await EventLog.objects.acount() == 7
    assert [e.event_type for e in events] == [
        "member.joined",
        "member.left",
        "bot.added",
        "message.edited",
        "message.recalled",
        "reaction.added",
        "card.clicked",
    ]
    edited, recalled, reaction, clicked = events[3], events[4], events[5], events[6]
    assert (edited.input["text"], edited.data["mentioned"]) == ("fixed text", True)
    assert recalled.data["target_message_id"] == "m-old"
    assert reaction.data["reaction"] == "thumbsup"
    assert clicked.data["action"] == "approve"
    assert events[0].actor["actor_id"] == USER_ID


@pytest.mark.django_db(transaction=True)
async def test_a_dropped_socket_reconnects_and_a_restart_asks_for_what_it_missed_once(
    fake_satori, satori_bot_for, connectors, monkeypatch
):
    bot = await _connected_bot(satori_bot_for, fake_satori)
    fake_satori.send_event(fake_satori.message_created("one", direct=True))
    await _until(_events(1))

    fake_satori.drop()
    await asyncio.to_thread(fake_satori.wait_connected)
    assert fake_satori.identifies[-1] == {"token": TOKEN, "sn": 1}
    fake_satori.send_event(fake_satori.message_created("two", direct=True))
    await _until(_events(2))
    assert await database_sync_to_async(lambda: PlatformCursor.objects.get(bot=bot).value)() == "2"

    # The connector process stops; an event comes meanwhile; a new process picks up after sn 2.
    connectors.set()
    await asyncio.sleep(0.5)
    fake_satori.send_event(fake_satori.message_created("three", direct=True))
    stop = asyncio.Event()
    task = asyncio.create_task(connectors_serve(stop=stop, rescan_seconds=0.2))
    try:
        await asyncio.to_thread(fake_satori.wait_connected)
        events = await _until(_events(3))
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert fake_satori.identifies[-1] == {"token": TOKEN, "sn": 2}
    assert fake_satori.replayed == [3]
    assert [e.input["text"] for e in events] == ["one", "two", "three"]
    assert await EventLog.objects.acount() == 3


@pytest.mark.django_db(transaction=True)
async def test_frames_of_the_wrong_shape_are_ignored_and_the_connection_stays(fake_satori, satori_bot_for, connectors):
    bot = await _connected_bot(satori_bot_for, fake_satori)
    fake_satori.send_raw("not json {")
    fake_satori.send_raw("[1, 2]")
    fake_satori.send_raw('{"op": 0, "body": "a string"}')
    fake_satori.send_event(fake_satori.event("message-created", message={"content": "no id"}))
    fake_satori.send_event(fake_satori.event("message-created", message=["a", "list"], channel="x"))
    fake_satori.send_event(fake_satori.message_created("still here", direct=True))

    (event,) = await _until(_events(1))
    assert event.input["text"] == "still here"
    assert len(fake_satori.identifies) == 1
    response = await asyncio.to_thread(
        Client().post, f"/platforms/satori/{bot.workspace.slug}/{bot.bot_id}/webhook", b"{}", "application/json"
    )
    assert response.status_code == 404


@pytest.mark.django_db(transaction=True)
async def test_a_wrong_token_is_an_error_on_the_bots_page_not_a_fast_reconnect_loop(fake_satori, satori_bot_for):
    adapter = SatoriAdapter(bot_id="s", credentials=_credentials(fake_satori, token="guessed"))
    updates: list[Any] = []

    async def on_update(update: Any) -> None:
        updates.append(update)

    connector = SatoriConnector(adapter=adapter, on_update=on_update)
    task = asyncio.create_task(connector.run())
    try:
        deadline = time.monotonic() + 10
        while connector.state != "error":
            assert time.monotonic() < deadline, connector.state
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert "refused the token" in connector.detail
    assert connector.sessions == 1


# -- delivery ---------------------------------------------------------------------------------------


@database_sync_to_async
def _platform_run(bot_for: Callable[..., Bot], fake: FakeSatori, content: str, **options: Any) -> Run:
    from platforms.inbound import platform_update_accept

    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = bot_for(workspace)
    adapter = SatoriAdapter(bot_id=bot.bot_id, credentials=bot.credentials)
    update = adapter.event_update(fake.message_created(content, **options))
    assert update is not None
    platform_update_accept(bot=bot, update=update)
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_streamed_reply_is_one_message_quoting_the_question_updated_as_it_grows(fake_satori, satori_bot_for):
    run = await _platform_run(satori_bot_for, fake_satori, f'<at id="{SELF_ID}"/> hi', message_id="q1")
    words = [f"<w{i}> " for i in range(12)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.03) for w in words], ([_completed("".join(words).strip())], 0.03)
    )

    assert fake_satori.texts(CHANNEL_ID) == ["".join(words).strip()]
    writes = fake_satori.calls_of("message.create", "message.update")
    assert writes[0].method == "message.create"
    assert writes[0].body["content"].startswith('<quote id="q1"/>&lt;w0&gt;')  # escaped, not an element
    assert (writes[0].headers["satori-platform"], writes[0].headers["satori-user-id"]) == (PLATFORM, SELF_ID)
    assert {w.method for w in writes[1:]} == {"message.update"}
    assert 2 <= len(writes) < len(words)
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


def test_reactions_files_and_identity_on_the_api(fake_satori):
    adapter = SatoriAdapter(bot_id="s", credentials=_credentials(fake_satori))
    url = fake_satori.add_file("notes.pdf", b"%PDF-1.7\n")

    async def use() -> tuple[Any, str]:
        try:
            await adapter.add_reaction(SentMessage(chat_id=CHANNEL_ID, message_id="m1"), "👍")
            fetched = await adapter.fetch_file(PlatformFileRef(ref={"url": url}, name="notes.pdf"))
            return fetched, await adapter.identity()
        finally:
            await adapter.aclose()

    fetched, line = async_to_sync(use)()

    assert fake_satori.calls_of("reaction.create")[0].body == {
        "channel_id": CHANNEL_ID,
        "message_id": "m1",
        "emoji": "👍",
    }
    assert fetched.data == b"%PDF-1.7\n"
    assert "langbot on onebot" in line


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    missing = api_client.post(
        "/api/v1/bots",
        {"bot_id": "s1", "platform": "satori", "name": "S", "credentials": {"endpoint": "ftp://x"}},
        format="json",
    )

    assert missing.status_code == 400
    assert set(missing.json()["error"]["details"]["fields"]) == {
        "credentials.endpoint",
        "credentials.platform",
        "credentials.self_id",
    }


# -- the connector process with a real worker and the qa-runner ---------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_direct_message_on_the_socket_is_answered_with_a_reply_that_grows_by_updates(
    worker, qa_binding, satori_bot_for, fake_satori, celery_queue
):
    from tests.processes import REPO_ROOT, _host_env

    bot = satori_bot_for(qa_binding().workspace)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_connectors", "--rescan", "1"],
        cwd=REPO_ROOT,
        env=_host_env(celery_queue),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        fake_satori.wait_connected(timeout=60)
        fake_satori.send_event(fake_satori.message_created("qa:type:1.5 hello", direct=True))

        run = _run_of(bot)
        assert run.status == Run.Status.COMPLETED
        assert _delivery_of(run).status == "delivered"
        assert fake_satori.texts(DIRECT_CHANNEL) == [run.output]
        writes = fake_satori.calls_of("message.create", "message.update")
        assert writes[0].body["content"] != run.output  # the first write showed the reply still growing
        assert {w.method for w in writes[1:]} == {"message.update"}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
