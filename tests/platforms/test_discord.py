"""Discord on a fake Discord (gateway + REST API): the connector process's session (HELLO, IDENTIFY, READY,
heartbeats, MESSAGE_CREATE) turns direct messages and mentions into events and ignores the bot's own
messages; a dropped connection is resumed after the backoff and its status shows on the way; replies are
streamed by message edits, split at Discord's 2,000 characters, wait out a 429's `retry_after`;
attachments both ways; and with a real worker and the qa-runner a message is answered end to end."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.core.cache import cache

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from platforms.adapters.discord import DiscordAdapter, DiscordConnector
from platforms.connectors import connection_label, connection_statuses, connectors_serve
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import PlatformAPIError, PlatformFileRef
from platforms.models import PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.discord_server import BOT_USER_ID, TOKEN, FakeDiscord
from tests.fakes.platform_http import serving
from tests.platforms.test_delivery_policy import INTERVAL, _completed, _deliver, _delta, fast_pace  # noqa: F401
from tests.platforms.test_telegram_e2e import _delivery as _delivery_of
from tests.platforms.test_telegram_e2e import _run_of
from transcripts.models import EventLog

DM_CHANNEL = "300000000000000001"
GUILD_CHANNEL = "300000000000000002"
GUILD = "500000000000000001"


@pytest.fixture
def fake_discord() -> Iterator[FakeDiscord]:
    with serving(FakeDiscord()) as fake:
        yield fake


@pytest.fixture
def discord_bot_for(fake_discord: FakeDiscord) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="discord",
            credentials={"token": TOKEN, "api_base_url": fake_discord.api_base_url, **credentials},
        )

    return make


@pytest.fixture
def fast_reconnect(monkeypatch: Any) -> None:
    monkeypatch.setattr(DiscordConnector, "reconnect_first_delay", 0.2)


@pytest.fixture
async def connectors(fast_reconnect: None) -> AsyncIterator[None]:
    """The connector process's loop, run in this test's loop."""
    await database_sync_to_async(cache.clear)()  # statuses of bots (same primary keys) of earlier test databases
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


def _status(bot: Bot) -> str:
    return connection_label(connection_statuses([bot]).get(bot.pk))


# -- the gateway ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_direct_message_and_a_mention_become_events_and_the_bots_own_messages_do_not(
    fake_discord, discord_bot_for, connectors
):
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    bot = await database_sync_to_async(discord_bot_for)(workspace)
    await asyncio.to_thread(fake_discord.wait_ready)

    (identify,) = fake_discord.identifies
    assert identify["token"] == TOKEN
    assert identify["intents"] & (1 << 15)  # message content
    own = fake_discord.message_create("my own answer", author_id=BOT_USER_ID, bot=True)
    chatter = fake_discord.message_create("people talking", channel_id=GUILD_CHANNEL, guild_id=GUILD)
    mention = fake_discord.message_create(
        f"<@{BOT_USER_ID}> summarise", channel_id=GUILD_CHANNEL, guild_id=GUILD, mention_bot=True
    )
    direct = fake_discord.message_create("hello there")
    for message in (own, chatter, mention, direct):
        fake_discord.send_message(message)

    events = await _until(lambda: list(EventLog.objects.order_by("id")) if EventLog.objects.count() >= 2 else None)
    assert [e.input["text"] for e in events] == ["summarise", "hello there"]
    assert events[0].data["reply_target"] == {"chat_id": GUILD_CHANNEL, "reply_to_message_id": mention["id"]}
    assert events[1].data["reply_target"] == {"chat_id": DM_CHANNEL}
    assert events[1].event_id == f"discord:{bot.bot_id}:{direct['id']}"
    assert (events[1].source, events[1].actor["actor_id"]) == ("platform", "400000000000000001")
    await asyncio.sleep(0.7)  # past one heartbeat interval of the fake
    assert fake_discord.heartbeats >= 1
    assert await database_sync_to_async(_status)(bot) == "connected"
    assert await EventLog.objects.acount() == 2


@pytest.mark.django_db(transaction=True)
async def test_a_dropped_connection_is_resumed_after_the_backoff_and_its_status_says_so(
    fake_discord, discord_bot_for, connectors, monkeypatch
):
    monkeypatch.setattr(DiscordConnector, "reconnect_first_delay", 1.0)  # long enough to be seen
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    bot = await database_sync_to_async(discord_bot_for)(workspace)
    await asyncio.to_thread(fake_discord.wait_ready)
    assert await _until(lambda: _status(bot) == "connected")

    fake_discord.drop()
    assert (await _until(lambda: _status(bot) if _status(bot) != "connected" else None)).startswith("reconnecting")
    await asyncio.to_thread(fake_discord.wait_ready)
    fake_discord.send_message(fake_discord.message_create("still there?"))

    event = await _until(lambda: EventLog.objects.first())
    assert event.input["text"] == "still there?"
    assert len(fake_discord.identifies) == 1
    assert fake_discord.resumes[0]["session_id"] == "session-1"
    assert await _until(lambda: _status(bot) == "connected")


@pytest.mark.django_db(transaction=True)
async def test_a_connection_whose_heartbeats_go_unacknowledged_is_closed_and_resumed(
    fake_discord, discord_bot_for, connectors
):
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(discord_bot_for)(workspace)
    await asyncio.to_thread(fake_discord.wait_ready)

    fake_discord.ack_heartbeats = False
    await asyncio.to_thread(fake_discord.wait_ready)  # HEARTBEAT_INTERVAL_MS is 500: within a few beats

    assert len(fake_discord.resumes) == 1
    assert len(fake_discord.identifies) == 1


@pytest.mark.django_db(transaction=True)
async def test_a_refused_token_shows_as_an_error_and_a_new_token_connects(fake_discord, discord_bot_for, connectors):
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    bot = await database_sync_to_async(discord_bot_for)(workspace, token="not-the-token")

    label = await _until(lambda: _status(bot) if _status(bot).startswith("error") else None)
    assert "401" in label
    await Bot.objects.filter(pk=bot.pk).aupdate(credentials={"token": TOKEN, "api_base_url": fake_discord.api_base_url})
    await asyncio.to_thread(fake_discord.wait_ready)
    assert await _until(lambda: _status(bot) == "connected")


@pytest.mark.django_db
def test_the_bots_admin_page_and_list_show_its_connection(discord_bot_for, workspace):
    from django.test import Client

    from platforms.connectors import connection_status_set
    from tests.factories import UserFactory

    bot = discord_bot_for(workspace)
    connection_status_set(bot_pk=bot.pk, state="backoff", detail="the connection closed (1006)")
    admin = Client()
    admin.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    page = admin.get(f"/admin/bindings/bot/{bot.pk}/change/").content.decode()
    listing = admin.get("/admin/bindings/bot/").content.decode()

    assert "reconnecting: the connection closed (1006)" in page
    assert "reconnecting: the connection closed (1006)" in listing


# -- delivery -----------------------------------------------------------------------------------------


@database_sync_to_async
def _platform_run(bot_for: Callable[..., Bot], fake: FakeDiscord, **message: Any) -> Run:
    """A run of a Discord message, as the connector would have accepted it."""
    from platforms.inbound import platform_update_accept

    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = bot_for(workspace)
    adapter = DiscordAdapter(bot_id=bot.bot_id, credentials=bot.credentials)
    update = adapter.message_update(fake.message_create("hi", **message), bot_user_id=BOT_USER_ID)
    assert update is not None
    platform_update_accept(bot=bot, update=update)
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_streamed_deltas_become_paced_message_edits_ending_with_the_final_text(fake_discord, discord_bot_for):
    run = await _platform_run(discord_bot_for, fake_discord, channel_id=GUILD_CHANNEL, guild_id=GUILD, mention_bot=True)
    words = [f"word{i} " for i in range(20)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.02) for w in words], ([_completed("".join(words).strip())], 0.02)
    )

    assert fake_discord.texts(GUILD_CHANNEL) == ["".join(words).strip()]
    writes = fake_discord.calls_of("POST /channels/{id}/messages", "PATCH /channels/{id}/messages/{id}")
    assert writes[0].method == "POST"
    assert writes[0].body["message_reference"]["message_id"] == fake_discord.sent[0].reference
    assert [w.method for w in writes[1:]] == ["PATCH"] * (len(writes) - 1)
    assert 2 <= len(writes) < len(words)
    assert min(b.at - a.at for a, b in itertools.pairwise(writes)) >= INTERVAL * 0.95
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_10000_character_reply_is_split_into_messages_within_discords_2000(fake_discord, discord_bot_for):
    run = await _platform_run(discord_bot_for, fake_discord)
    reply = ("Every sentence here is fifty characters in length. " * 200).strip()

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    texts = fake_discord.texts(DM_CHANNEL)
    assert len(texts) == 6
    assert all(len(t) <= 2000 and t.endswith("length.") for t in texts)
    assert " ".join(texts) == reply
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_429_is_waited_out_for_retry_after(fake_discord, discord_bot_for):
    run = await _platform_run(discord_bot_for, fake_discord)
    fake_discord.rate_limit_next("POST /channels/{id}/messages", retry_after=0.8)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("after the flood")], 0))

    refused, accepted = fake_discord.calls_of("POST /channels/{id}/messages")
    assert refused.status == 429
    assert accepted.at - refused.at >= 0.8
    assert fake_discord.texts(DM_CHANNEL) == ["after the flood"]
    delivery = await PlatformDelivery.objects.aget(run=run)
    assert (delivery.status, delivery.calls) == ("delivered", 2)


@pytest.mark.django_db(transaction=True)
async def test_a_file_the_run_created_is_uploaded_as_an_attachment(fake_discord, discord_bot_for):
    run = await _platform_run(discord_bot_for, fake_discord)
    artifact = await database_sync_to_async(artifact_create_from_bytes)(
        workspace=await database_sync_to_async(lambda: run.workspace)(),
        data=b"name,total\nada,3\n",
        name="report.csv",
        mime_type="text/csv",
        conversation_id=run.conversation_id,
        source=Artifact.Source.RUNNER,
    )
    created = RunEvent(type="artifact.created", data={"artifact_id": str(artifact.artifact_id), "name": "report.csv"})

    await _deliver(PlatformDeliveryPort(), run, ([created, _completed("here is the report")], 0))

    text, upload = fake_discord.sent
    assert text.content == "here is the report"
    assert upload.files == [("report.csv", b"name,total\nada,3\n")]
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db
def test_an_attachment_becomes_an_input_artifact(
    fake_discord, discord_bot_for, workspace, monkeypatch, django_capture_on_commit_callbacks
):
    from platforms.inbound import platform_update_accept

    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    AgentBindingFactory.create(workspace=workspace)
    bot = discord_bot_for(workspace)
    shared = fake_discord.add_attachment("notes.pdf", b"%PDF-1.7 meeting notes", "application/pdf")
    adapter = DiscordAdapter(bot_id=bot.bot_id, credentials=bot.credentials)
    update = adapter.message_update(
        fake_discord.message_create("what does it say?", attachments=[shared]), bot_user_id=BOT_USER_ID
    )
    assert update is not None

    with django_capture_on_commit_callbacks(execute=True):
        platform_update_accept(bot=bot, update=update)

    (attachment,) = EventLog.objects.get().input["attachments"]
    artifact = Artifact.objects.get(artifact_id=attachment["artifact_id"])
    assert (artifact.name, artifact.mime_type, attachment["size"]) == ("notes.pdf", "application/pdf", 22)


async def test_an_attachment_url_off_discord_is_not_fetched(fake_discord):
    adapter = DiscordAdapter(bot_id="b", credentials={"token": TOKEN, "api_base_url": fake_discord.api_base_url})
    elsewhere = PlatformFileRef(ref={"url": "https://files.example.net/a.pdf"}, name="a.pdf")

    with pytest.raises(Exception, match="refusing to fetch"):
        await adapter.fetch_file(elsewhere)


async def test_an_attachment_at_an_internal_api_base_url_is_not_fetched_unless_the_operator_allowed_it(fake_discord):
    # api_base_url is a credential a workspace writes; the fake listens on 127.0.0.1, an internal address.
    credentials = {"token": TOKEN, "api_base_url": fake_discord.api_base_url}
    ref = PlatformFileRef(ref={"url": f"{fake_discord.api_base_url}/attachments/a.pdf"}, name="a.pdf")

    with pytest.raises(PlatformAPIError, match="address is refused"):
        await DiscordAdapter(bot_id="b", credentials=credentials, allow_private=False).fetch_file(ref)


def test_ctx_delivery_says_what_discord_supports():
    discord = surface_delivery("discord")
    assert (discord.supports_streaming, discord.supports_edit, discord.supports_reaction) == (True, True, True)
    assert discord.max_message_size == 2000


# -- the connector process with a real worker and the qa-runner ---------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_message_on_the_gateway_is_answered_with_a_reply_that_grows_by_edits(
    worker, qa_binding, discord_bot_for, fake_discord, celery_queue
):
    from tests.processes import REPO_ROOT, _host_env

    bot = discord_bot_for(qa_binding().workspace)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_connectors", "--rescan", "1"],
        cwd=REPO_ROOT,
        env=_host_env(celery_queue),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        fake_discord.wait_ready(timeout=30)
        fake_discord.send_message(fake_discord.message_create("qa:type:1.5 hello"))

        run = _run_of(bot)
        assert run.status == Run.Status.COMPLETED
        assert _delivery_of(run).status == "delivered"
        assert fake_discord.texts(DM_CHANNEL) == [run.output]
        writes = fake_discord.calls_of("POST /channels/{id}/messages", "PATCH /channels/{id}/messages/{id}")
        assert writes[0].body["content"] != run.output  # the first write showed the reply still growing
        assert [w.method for w in writes[1:]] == ["PATCH"] * (len(writes) - 1)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
