"""DingTalk's Stream mode and AI cards on fakes of DingTalk's OpenAPI and stream gateway: a bot in
`mode: stream` opens a connection (client id and secret, a one-time ticket), a robot message pushed over
it becomes a run whose reply goes back through the message's session webhook, each push is acknowledged,
pings are answered, a dropped socket or DingTalk's `disconnect` brings a new connection with a new ticket,
a callback-mode bot holds none; with a card template a streamed reply is one AI card updated in order and
finalised at the end; a card click pushed over the stream is a `card.clicked` event."""

from __future__ import annotations

import asyncio
import itertools
import logging
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

from bindings.models import Bot
from platforms.adapters.dingtalk_stream import DingTalkStreamConnector
from platforms.connectors import connection_label, connection_statuses, connectors_serve
from platforms.delivery import PlatformDeliveryPort
from platforms.models import PlatformDelivery
from runners.actions.delivery import surface_delivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.dingtalk_server import CLIENT_ID, CLIENT_SECRET, FakeDingTalk
from tests.fakes.dingtalk_stream import TOPIC_CARD, FakeDingTalkStream, stream_serving
from tests.fakes.platform_http import serving
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    _delta,
    fast_pace,
)
from tests.platforms.test_dingtalk import post_message
from tests.platforms.test_telegram_e2e import _delivery as _delivery_of
from tests.platforms.test_telegram_e2e import _run_of
from transcripts.models import EventLog


@pytest.fixture
def fake_dingtalk() -> Iterator[FakeDingTalk]:
    with serving(FakeDingTalk()) as fake:
        yield fake


@pytest.fixture
def gateway(fake_dingtalk: FakeDingTalk) -> Iterator[FakeDingTalkStream]:
    with stream_serving(fake_dingtalk) as fake:
        yield fake


@pytest.fixture
def dingtalk_bot_for(fake_dingtalk: FakeDingTalk) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="dingtalk",
            credentials={
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "api_base_url": fake_dingtalk.origin,
                **credentials,
            },
        )

    return make


@pytest.fixture
async def connectors(monkeypatch: Any) -> AsyncIterator[None]:
    """The connector process's loop, run in this test's loop."""
    monkeypatch.setattr(DingTalkStreamConnector, "reconnect_first_delay", 0.2)
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


def _status(bot: Bot) -> str:
    return connection_label(connection_statuses([bot]).get(bot.pk))


@database_sync_to_async
def _stream_bot(dingtalk_bot_for: Callable[..., Bot], **credentials: Any) -> Bot:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    return dingtalk_bot_for(workspace, **{"mode": "stream", **credentials})


# -- Stream mode ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_message_over_the_stream_becomes_a_run_whose_reply_goes_to_the_session_webhook(
    fake_dingtalk, gateway, dingtalk_bot_for, connectors
):
    bot = await _stream_bot(dingtalk_bot_for)
    await asyncio.to_thread(gateway.wait_connected)
    (opened,) = fake_dingtalk.calls_of("connections.open")
    assert (opened.body["clientId"], opened.body["clientSecret"]) == (CLIENT_ID, CLIENT_SECRET)
    assert {"type": "CALLBACK", "topic": "/v1.0/im/bot/messages/get"} in opened.body["subscriptions"]

    message = fake_dingtalk.robot_message("what's up?", group=True, conversation_id="cidStream==", staff_id="s-ed")
    pushed = await asyncio.to_thread(gateway.push_message, message)
    again = await asyncio.to_thread(gateway.push_message, message)  # DingTalk pushing it again

    ack = await asyncio.to_thread(gateway.ack, pushed)
    assert (ack["code"], ack["headers"]["messageId"], ack["message"]) == (200, pushed, "OK")
    await asyncio.to_thread(gateway.ack, again)
    event = await _until(lambda: EventLog.objects.first())
    assert event.input["text"] == "what's up?"
    assert event.event_id == f"dingtalk:{bot.bot_id}:{message['msgId']}"
    assert event.conversation_id == f"bot:{bot.bot_id}:cidStream=="
    run = await Run.objects.aget(bot=bot)
    assert await EventLog.objects.acount() == 1

    await _deliver(PlatformDeliveryPort(), run, ([_completed("All quiet.")], 0))

    (sent,) = fake_dingtalk.sent
    assert (sent.route, sent.where, sent.text) == ("sessionWebhook", "cidStream==", "@s-ed All quiet.")
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"
    # Read as the bot's page reads it, from the supervisor's published states (rescanned every 0.2 s here).
    assert await _until(lambda: _status(bot) == "connected")


@pytest.mark.django_db(transaction=True)
async def test_pings_are_answered_and_a_dropped_socket_or_a_disconnect_brings_a_new_connection(
    fake_dingtalk, gateway, dingtalk_bot_for, connectors
):
    bot = await _stream_bot(dingtalk_bot_for)
    await asyncio.to_thread(gateway.wait_connected)
    ping = await asyncio.to_thread(gateway.push, "SYSTEM", "ping", {"opaque": "p-1"})
    assert (await asyncio.to_thread(gateway.ack, ping))["data"] == '{"opaque": "p-1"}'

    gateway.drop()
    await asyncio.to_thread(gateway.wait_connected, 2)
    await asyncio.to_thread(gateway.push, "SYSTEM", "disconnect", {"reason": "server is restarting"})
    await asyncio.to_thread(gateway.wait_connected, 3)
    message = fake_dingtalk.robot_message("still there?", staff_id="s-fi")
    await asyncio.to_thread(gateway.ack, await asyncio.to_thread(gateway.push_message, message))

    event = await _until(lambda: EventLog.objects.first())
    assert event.input["text"] == "still there?"
    # Each connection was opened with a ticket of its own, and none was used twice.
    assert len(fake_dingtalk.tickets) == 3
    assert gateway.refused_tickets == []
    assert await _until(lambda: _status(bot) == "connected")


@pytest.mark.django_db(transaction=True)
async def test_junk_over_the_stream_is_acknowledged_or_ignored_and_the_connection_stays(
    fake_dingtalk, gateway, dingtalk_bot_for, connectors, caplog
):
    await _stream_bot(dingtalk_bot_for)
    await asyncio.to_thread(gateway.wait_connected)

    await asyncio.to_thread(gateway.send_raw, "not json at all")
    await asyncio.to_thread(gateway.send_raw, '["a", "list"]')
    junk = [
        await asyncio.to_thread(gateway.push, "CALLBACK", "/v1.0/im/bot/messages/get", "not json"),
        await asyncio.to_thread(gateway.push, "CALLBACK", "/v1.0/im/bot/messages/get", {"text": {"content": "hi"}}),
        await asyncio.to_thread(gateway.push, "CALLBACK", TOPIC_CARD, {"value": "{broken"}),
        await asyncio.to_thread(gateway.push, "EVENT", "chat_update_title", {"title": "x"}),
    ]
    good = fake_dingtalk.robot_message("and now a real one", staff_id="s-jo")
    await asyncio.to_thread(gateway.ack, await asyncio.to_thread(gateway.push_message, good))

    acks = [await asyncio.to_thread(gateway.ack, each) for each in junk]
    assert [a["code"] for a in acks] == [200, 200, 200, 200]
    event = await _until(lambda: EventLog.objects.first())
    assert event.input["text"] == "and now a real one"
    assert await EventLog.objects.acount() == 1
    assert gateway.connections == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.django_db(transaction=True)
async def test_refused_credentials_show_as_an_error_and_a_callback_mode_bot_holds_no_connection(
    fake_dingtalk, gateway, dingtalk_bot_for, connectors
):
    refused = await _stream_bot(dingtalk_bot_for, client_secret="not-the-secret")
    callback = await _stream_bot(dingtalk_bot_for, mode="callback")

    label = await _until(lambda: _status(refused) if _status(refused).startswith("error") else None)
    assert "refused the app's credentials" in label
    assert await _until(lambda: _status(callback) == "connected: HTTP callback mode: no connection to hold")
    assert all(c.body["clientSecret"] == "not-the-secret" for c in fake_dingtalk.calls_of("connections.open"))
    assert gateway.connections == 0


@pytest.mark.django_db(transaction=True)
async def test_a_stream_bot_reaches_no_private_address_unless_its_workspace_may(
    fake_dingtalk, gateway, dingtalk_bot_for, connectors, settings
):
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False  # the test settings allow loopback host-wide for the fakes
    bot = await _stream_bot(dingtalk_bot_for)

    label = await _until(lambda: _status(bot) if _status(bot).startswith("reconnecting") else None)

    assert "refused" in label
    assert not fake_dingtalk.calls_of("connections.open")
    assert gateway.connections == 0


@pytest.mark.django_db(transaction=True)
async def test_a_card_click_over_the_stream_is_a_card_clicked_event(
    fake_dingtalk, gateway, dingtalk_bot_for, connectors
):
    bot = await _stream_bot(dingtalk_bot_for)
    await asyncio.to_thread(gateway.wait_connected)
    click = {
        "outTrackId": "lbh-card-1",
        "userId": "s-gu",
        "corpId": "ding0123456789corp",
        "spaceType": "IM_GROUP",
        "spaceId": "cidCards==",
        "createTime": 1_700_000_000_000,
        "value": '{"cardPrivateData": {"actionIds": ["approve"], "params": {"ticket": "T-7"}}}',
    }

    ack = await asyncio.to_thread(gateway.ack, await asyncio.to_thread(gateway.push, "CALLBACK", TOPIC_CARD, click))

    assert ack["code"] == 200
    event = await _until(lambda: EventLog.objects.first())
    assert event.event_type == "card.clicked"
    assert event.data["action"] == {"ids": ["approve"], "params": {"ticket": "T-7"}}
    assert event.data["reply_target"]["chat_id"] == "cidCards=="
    assert (event.actor["actor_id"], event.data["target_message_id"]) == ("s-gu", "lbh-card-1")
    assert event.bot_id == bot.pk


# -- AI cards ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_with_a_card_template_a_streamed_reply_is_one_ai_card_updated_in_order_and_finalised(
    fake_dingtalk, dingtalk_bot_for
):
    @database_sync_to_async
    def card_run() -> Run:
        workspace = WorkspaceFactory.create()
        AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
        bot = dingtalk_bot_for(workspace, card_template_id="tpl-ai.schema")
        message = fake_dingtalk.robot_message("tell me", group=True, conversation_id="cidCard==")
        assert post_message(bot, message).status_code == 200
        return Run.objects.get(bot=bot)

    run = await card_run()
    words = [f"w{i} " for i in range(12)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.03) for w in words], ([_completed("".join(words).strip())], 0.03)
    )

    (track, card) = next(iter(fake_dingtalk.cards.items()))
    assert len(fake_dingtalk.cards) == 1
    assert (card.template_id, card.space) == ("tpl-ai.schema", "dtv1.card//IM_GROUP.cidCard==")
    assert card.deliver == {"robotCode": CLIENT_ID}
    contents = card.contents
    assert len(contents) >= 3  # seen growing, not only at the end
    # In order: each update shows at least what the one before it did, and the last one is the whole reply.
    assert all(b.startswith(a.strip()) for a, b in itertools.pairwise(contents))
    assert contents[-1] == "".join(words).strip()
    assert [u["isFinalize"] for u in card.updates] == [False] * (len(contents) - 1) + [True]
    assert all(u["isFull"] and u["key"] == "content" for u in card.updates)
    assert not fake_dingtalk.sent  # no plain message beside the card
    delivery = await PlatformDelivery.objects.aget(run=run)
    assert (delivery.status, delivery.message_ids) == ("delivered", [track])


def test_a_card_bot_says_it_can_edit_and_a_plain_one_does_not():
    from platforms.adapters.dingtalk import DingTalkAdapter

    credentials = {"client_id": "c", "client_secret": "s"}
    card = DingTalkAdapter(bot_id="b", credentials={**credentials, "card_template_id": "t"})
    plain = DingTalkAdapter(bot_id="b", credentials=credentials)

    assert (card.capabilities.edit, plain.capabilities.edit) == (True, False)
    assert "message.edit" in card.capabilities.actions
    # Runners are told what the bot their event came through can do.
    told_card = surface_delivery("dingtalk", credentials={**credentials, "card_template_id": "t"})
    told_plain = surface_delivery("dingtalk", credentials=credentials)
    assert (told_card.supports_streaming, told_card.supports_edit) == (True, True)
    assert (told_plain.supports_streaming, told_plain.supports_edit) == (False, False)


@pytest.mark.django_db
def test_a_mode_other_than_callback_or_stream_is_refused_on_save(api_client):
    answer = api_client.post(
        "/api/v1/bots",
        {
            "bot_id": "dt",
            "platform": "dingtalk",
            "credentials": {"client_id": CLIENT_ID, "client_secret": "s", "mode": "websocket"},
        },
        format="json",
    )

    assert answer.status_code == 400
    assert set(answer.json()["error"]["details"]["fields"]) == {"credentials.mode"}


# -- the connector process with a real worker and the qa-runner ---------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_message_over_the_stream_is_answered_by_a_real_run_in_an_ai_card(
    worker, qa_binding, dingtalk_bot_for, fake_dingtalk, gateway, celery_queue
):
    from tests.processes import REPO_ROOT, _host_env

    bot = dingtalk_bot_for(qa_binding(delivery_policy={"enable_reply": True}).workspace, mode="stream",
                           card_template_id="tpl-ai.schema")  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_connectors", "--rescan", "1"],
        cwd=REPO_ROOT,
        env=_host_env(celery_queue),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        gateway.wait_connected(timeout=60)  # the connector process starts Django first
        message = fake_dingtalk.robot_message("qa:type:1.5 hello", staff_id="s-qa")
        gateway.ack(gateway.push_message(message))

        run = _run_of(bot)
        assert run.status == Run.Status.COMPLETED
        assert _delivery_of(run).status == "delivered"
        (card,) = fake_dingtalk.cards.values()
        assert card.space == "dtv1.card//IM_ROBOT.s-qa"
        assert card.contents[-1] == run.output
        assert card.finished
        assert card.contents[0] != run.output  # the card showed the reply still growing
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
