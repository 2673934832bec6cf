"""The website chat widget's socket `/ws/v1/widget/`: admitted by a widget ticket from an origin the bot allows;
a visitor sends to the bot and reads only their own conversation; messages are rate-limited per visitor; the
visitor sees replies, not the run's insides."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.cache import cache
from django.test import Client

from bindings.models import Bot
from langbot_host.asgi import application
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.streaming.conftest import ORIGIN, RECEIVE_TIMEOUT, emit, next_json, open_socket
from transcripts.models import TranscriptItem
from webchat.tickets import ws_ticket_issue
from webchat.widget import widget_public_id

pytestmark = pytest.mark.django_db(transaction=True)

SITE = "https://shop.example.com"


@pytest.fixture(autouse=True)
def _fresh_limits(settings):
    cache.clear()
    settings.LANGBOT_WIDGET_MESSAGES_PER_VISITOR_MINUTE = 10


def _web_bot() -> Bot:
    workspace = WorkspaceFactory.create()
    bot = BotFactory.create(workspace=workspace, allowed_origins=[SITE])
    AgentBindingFactory.create(workspace=workspace, binding_id="support", concurrency_policy="parallel")
    return bot


def _session(bot: Bot, token: str | None = None) -> dict[str, Any]:
    response = Client().post(
        f"/widget/{widget_public_id(bot)}/session",
        data={"token": token} if token else {},
        content_type="application/json",
        HTTP_ORIGIN=SITE,
    )
    assert response.status_code == 201, response.content
    return dict(response.json())


async def _visitor(bot: Bot, *, origin: str = SITE, token: str | None = None) -> tuple[Any, dict[str, Any]]:
    session = await database_sync_to_async(_session)(bot, token)
    comm = WebsocketCommunicator(application, session["ws_path"], headers=[(b"origin", origin.encode())])
    connected, _ = await comm.connect(timeout=RECEIVE_TIMEOUT)
    assert connected
    return comm, session


async def _subscribed(comm: Any) -> dict[str, Any]:
    await comm.send_json_to({"type": "subscribe"})
    message = await next_json(comm)
    assert message["type"] == "subscribed"
    return message


async def test_a_visitor_sends_to_the_bot_in_their_own_conversation_and_sees_the_reply_stream():
    bot = await database_sync_to_async(_web_bot)()
    comm, session = await _visitor(bot)
    await _subscribed(comm)

    await comm.send_json_to({"type": "message", "text": "hello"})
    status = await next_json(comm)

    assert status["type"] == "run.status"
    assert set(status) <= {"type", "run_id", "status", "event_id"}, "no binding or runner ids for visitors"
    run = await database_sync_to_async(Run.objects.select_related("event").get)(run_id=status["run_id"])
    assert run.conversation_id == session["conversation_id"]
    assert run.event.source == "webui"
    assert run.event.bot_id == bot.pk
    await emit(run, "message.delta", "tool.call.started", "message.delta")
    events = [await next_json(comm) for _ in range(3)]
    assert [e["event"]["type"] for e in events] == ["message.delta", "tool.call.started", "message.delta"]
    assert events[0]["event"]["data"] == {"chunk": {"content": "part1 "}}
    assert "data" not in events[1]["event"], "a tool call's arguments are not the visitor's to read"
    await comm.disconnect()


async def test_a_returning_visitor_reads_their_history_and_nobody_elses():
    bot = await database_sync_to_async(_web_bot)()
    first = await database_sync_to_async(_session)(bot)
    other = await database_sync_to_async(_session)(bot)

    def said(conversation_id: str, text: str, role: str = "user") -> None:
        TranscriptItem.objects.create(
            workspace_id=bot.workspace_id, conversation_id=conversation_id, role=role, content=text
        )

    await database_sync_to_async(said)(first["conversation_id"], "my question")
    await database_sync_to_async(said)(first["conversation_id"], "the answer", "assistant")
    await database_sync_to_async(said)(other["conversation_id"], "someone else's secret")
    comm, again = await _visitor(bot, token=first["token"])

    await comm.send_json_to({"type": "history"})
    history = await next_json(comm)

    assert again["conversation_id"] == first["conversation_id"]
    assert history["type"] == "history"
    assert [(i["role"], i["content"]) for i in history["items"]] == [
        ("assistant", "the answer"),
        ("user", "my question"),
    ]
    await comm.disconnect()


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        ({"type": "subscribe", "conversation_id": "webui:someone"}, "forbidden"),
        ({"type": "message", "conversation_id": "widget:x:another-visitor", "text": "hi"}, "forbidden"),
        ({"type": "cancel", "run_id": "00000000-0000-0000-0000-000000000000"}, "forbidden"),
        ({"type": "message", "text": "hi", "binding_id": "support"}, "invalid_argument"),
        ({"type": "message", "text": "hi", "bot_id": "another-bot"}, "invalid_argument"),
        ({"type": "message", "text": "see", "attachments": [{"artifact_id": "theirs"}]}, "invalid_argument"),
        ({"type": "message", "text": ""}, "invalid_argument"),
        ({"type": "message", "text": "x" * 4001}, "invalid_argument"),
    ],
    ids=["subscribe elsewhere", "send elsewhere", "cancel", "binding", "bot", "attachment", "empty", "too long"],
)
async def test_a_visitor_may_do_nothing_else(request_, code):
    bot = await database_sync_to_async(_web_bot)()
    comm, _ = await _visitor(bot)

    await comm.send_json_to(request_)
    reply = await next_json(comm)

    assert (reply["type"], reply["code"]) == ("error", code)
    assert await database_sync_to_async(Run.objects.count)() == 0
    await comm.disconnect()


async def test_messages_per_visitor_per_minute_are_limited(settings):
    settings.LANGBOT_WIDGET_MESSAGES_PER_VISITOR_MINUTE = 2
    bot = await database_sync_to_async(_web_bot)()
    comm, _ = await _visitor(bot)
    neighbour, _ = await _visitor(bot)
    await _subscribed(comm)
    await _subscribed(neighbour)

    replies = []
    for n in range(3):
        await comm.send_json_to({"type": "message", "text": f"message {n}"})
        replies.append(await next_json(comm))
    await neighbour.send_json_to({"type": "message", "text": "mine"})

    assert [r["type"] for r in replies] == ["run.status", "run.status", "error"]
    assert replies[-1]["code"] == "rate_limited"
    assert 1 <= replies[-1]["details"]["retry_after"] <= 61
    assert (await next_json(neighbour))["type"] == "run.status", "another visitor counts on their own"
    assert await database_sync_to_async(Run.objects.count)() == 3
    await comm.disconnect()
    await neighbour.disconnect()


async def test_an_observers_run_is_not_shown_to_the_visitor():
    bot = await database_sync_to_async(_web_bot)()
    await database_sync_to_async(AgentBindingFactory.create)(
        workspace=bot.workspace, binding_id="watcher", delivery_policy={"enable_reply": False}
    )
    comm, _ = await _visitor(bot)
    await _subscribed(comm)

    await comm.send_json_to({"type": "message", "text": "hello"})
    status = await next_json(comm)
    runs = await database_sync_to_async(lambda: list(Run.objects.order_by("is_observer")))()

    assert [r.is_observer for r in runs] == [False, True]
    assert status["run_id"] == str(runs[0].run_id)
    await emit(runs[1], "message.delta")
    await emit(runs[0], "message.delta")
    assert (await next_json(comm))["run_id"] == str(runs[0].run_id)
    await comm.disconnect()


@pytest.mark.parametrize("origin", ["https://evil.example", "http://shop.example.com", None])
async def test_the_handshake_from_another_origin_is_refused(origin):
    bot = await database_sync_to_async(_web_bot)()
    session = await database_sync_to_async(_session)(bot)
    headers = [(b"origin", origin.encode())] if origin else []

    comm = WebsocketCommunicator(application, session["ws_path"], headers=headers)
    connected, _ = await comm.connect(timeout=RECEIVE_TIMEOUT)

    assert not connected


async def test_an_origin_removed_from_the_bot_closes_the_door_to_tickets_issued_before():
    bot = await database_sync_to_async(_web_bot)()
    session = await database_sync_to_async(_session)(bot)
    await database_sync_to_async(Bot.objects.filter(pk=bot.pk).update)(allowed_origins=[])

    comm = WebsocketCommunicator(application, session["ws_path"], headers=[(b"origin", SITE.encode())])
    connected, _ = await comm.connect(timeout=RECEIVE_TIMEOUT)

    assert not connected


async def test_a_used_or_unknown_ticket_closes_with_4401():
    bot = await database_sync_to_async(_web_bot)()
    comm, session = await _visitor(bot)
    await comm.disconnect()

    for path in (session["ws_path"], "/ws/v1/widget/?ticket=made-up", "/ws/v1/widget/"):
        again = WebsocketCommunicator(application, path, headers=[(b"origin", SITE.encode())])
        await again.connect(timeout=RECEIVE_TIMEOUT)
        assert await again.receive_output(timeout=RECEIVE_TIMEOUT) == {"type": "websocket.close", "code": 4401}


async def test_the_chat_socket_and_the_widget_socket_take_no_ticket_of_the_other():
    bot = await database_sync_to_async(_web_bot)()
    widget = await database_sync_to_async(_session)(bot)
    chat_ticket, _ = await database_sync_to_async(ws_ticket_issue)(
        workspace_id=bot.workspace_id, principal="api-key:abc", display_name="key"
    )

    on_chat, _, _ = await open_socket(ORIGIN, query=f"ticket={widget['ticket']}")
    on_widget = WebsocketCommunicator(
        application, f"/ws/v1/widget/?ticket={chat_ticket}", headers=[(b"origin", SITE.encode())]
    )
    await on_widget.connect(timeout=RECEIVE_TIMEOUT)

    assert await on_chat.receive_output(timeout=RECEIVE_TIMEOUT) == {"type": "websocket.close", "code": 4401}
    assert await on_widget.receive_output(timeout=RECEIVE_TIMEOUT) == {"type": "websocket.close", "code": 4401}


async def test_a_message_after_the_site_was_removed_from_the_bot_closes_the_socket_with_4403():
    bot = await database_sync_to_async(_web_bot)()
    comm, _ = await _visitor(bot)
    await _subscribed(comm)
    await database_sync_to_async(Bot.objects.filter(pk=bot.pk).update)(allowed_origins=["https://other.example"])

    await comm.send_json_to({"type": "message", "text": "still there?"})
    while (output := await comm.receive_output(timeout=RECEIVE_TIMEOUT))["type"] != "websocket.close":
        pass

    assert output["code"] == 4403
    assert await database_sync_to_async(Run.objects.count)() == 0
