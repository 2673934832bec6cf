"""QQ through OneBot v11: a client connecting to the reverse WebSocket as NapCat does (its headers, its
event JSON, its responses with `echo`). A wrong or missing token is refused and recorded; private messages
and group messages that @ the bot become events (segments text, at, image, reply), others not; the reply
goes back over the same socket as a `send_msg` call that waits for its echo, whole (OneBot cannot edit);
the connection's status shows in /healthz; and end to end with real daphne, a real worker and the
qa-runner."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import websockets
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.cache import cache

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from langbot_host.asgi import application
from platforms.adapters.onebot import OneBotAdapter
from platforms.connectors import connection_label, connection_statuses
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import PlatformAPIError, PlatformFileRef
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.platform_http import FakePlatformServer, PlatformHandler, serving
from tests.platforms.test_delivery_policy import _completed, _deliver, _delta, fast_pace  # noqa: F401
from tests.platforms.test_telegram_e2e import _delivery as _delivery_of
from tests.platforms.test_telegram_e2e import _run_of
from transcripts.models import EventLog

ACCESS_TOKEN = "onebot-access-token-1"
SELF_ID = 10001
USER_ID = 20002
GROUP_ID = 30003
_message_ids = iter(range(1000, 10**9))


def ws_path(bot: Bot) -> str:
    return f"/platforms/onebot/{bot.workspace.slug}/{bot.bot_id}/ws"


def napcat_headers(token: str | None = ACCESS_TOKEN) -> list[tuple[bytes, bytes]]:
    headers = [(b"x-self-id", str(SELF_ID).encode()), (b"x-client-role", b"Universal")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return headers


def message_event(*segments: dict[str, Any], group: bool = False, user_id: int = USER_ID) -> dict[str, Any]:
    """A message event as NapCat pushes it (array message format)."""
    event: dict[str, Any] = {
        "time": int(time.time()),
        "self_id": SELF_ID,
        "post_type": "message",
        "message_type": "group" if group else "private",
        "sub_type": "normal" if group else "friend",
        "message_id": next(_message_ids),
        "user_id": user_id,
        "message": list(segments),
        "raw_message": "".join(str(s["data"].get("text") or "") for s in segments),
        "font": 14,
        "sender": {"user_id": user_id, "nickname": "Ada", "card": ""},
    }
    if group:
        event["group_id"] = GROUP_ID
    return event


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "data": {"text": value}}


def at(qq: int) -> dict[str, Any]:
    return {"type": "at", "data": {"qq": str(qq)}}


@pytest.fixture
def onebot_bot_for() -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace, platform="qq", credentials={"access_token": ACCESS_TOKEN, **credentials}
        )

    return make


@database_sync_to_async
def _bot(onebot_bot_for: Callable[..., Bot]) -> Bot:
    cache.clear()  # channel names and statuses of earlier test databases' bots
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    return onebot_bot_for(workspace)


async def _until(check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := await database_sync_to_async(check)()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return found


@pytest.mark.django_db(transaction=True)
async def test_a_wrong_or_missing_access_token_is_refused_and_recorded(onebot_bot_for):
    bot = await _bot(onebot_bot_for)

    wrong = WebsocketCommunicator(application, ws_path(bot), headers=napcat_headers("not-the-token"))
    missing = WebsocketCommunicator(application, ws_path(bot), headers=napcat_headers(None))
    by_query = WebsocketCommunicator(application, f"{ws_path(bot)}?access_token={ACCESS_TOKEN}")

    assert (await wrong.connect())[0] is False
    assert (await missing.connect())[0] is False
    assert (await by_query.connect())[0] is True  # OneBot v11's other way to give the token
    await by_query.disconnect()
    reasons = [(r.reason, r.count) async for r in InboundRefusal.objects.filter(bot=bot).order_by("id")]
    assert reasons == [("forged", 2)]


@pytest.mark.django_db(transaction=True)
async def test_private_and_mentioning_group_messages_become_events_and_the_reply_is_a_send_msg_call(
    onebot_bot_for,
):
    bot = await _bot(onebot_bot_for)
    client = WebsocketCommunicator(application, ws_path(bot), headers=napcat_headers())
    assert (await client.connect())[0] is True
    await client.send_json_to(
        {"time": 1, "self_id": SELF_ID, "post_type": "meta_event", "meta_event_type": "lifecycle"}
    )
    await _until(lambda: connection_statuses([bot]).get(bot.pk, {}).get("state") == "connected")

    chatter = message_event(text("people talking"), group=True)
    mention = message_event(at(SELF_ID), text(" summarise"), group=True)
    own = message_event(text("my own words"), user_id=SELF_ID)
    private = message_event(text("hello there"))
    for event in (chatter, mention, own, private):
        await client.send_json_to(event)

    private_event = await _until(lambda: EventLog.objects.filter(input__text="hello there").first())
    assert private_event.data["reply_target"] == {"chat_id": f"private:{USER_ID}"}
    assert private_event.actor["actor_id"] == str(USER_ID)
    group_event = await EventLog.objects.aget(input__text="summarise")
    assert group_event.data["reply_target"] == {
        "chat_id": f"group:{GROUP_ID}",
        "reply_to_message_id": str(mention["message_id"]),
    }
    assert await EventLog.objects.acount() == 2
    run = await Run.objects.aget(event__event_id=private_event.event_id)

    async def napcat_answers() -> dict[str, Any]:
        call = await client.receive_json_from(timeout=10)
        await client.send_json_to({"status": "ok", "retcode": 0, "data": {"message_id": 555}, "echo": call["echo"]})
        return call

    answering = asyncio.create_task(napcat_answers())
    await _deliver(PlatformDeliveryPort(), run, ([_delta("hello ")], 0), ([_completed("hello back")], 0.05))
    call = await answering

    assert call["action"] == "send_msg"
    assert call["params"] == {
        "message_type": "private",
        "user_id": USER_ID,
        "message": [{"type": "text", "data": {"text": "hello back"}}],
    }
    delivery = await PlatformDelivery.objects.aget(run=run)
    assert (delivery.status, delivery.message_ids, delivery.calls) == ("delivered", ["555"], 1)
    await client.disconnect()
    await _until(lambda: connection_statuses([bot]).get(bot.pk, {}).get("state") == "disconnected")


@pytest.mark.django_db
def test_a_group_mention_with_an_image_and_a_reply_is_read_from_its_segments(onebot_bot_for, workspace):
    from platforms.adapters.onebot import OneBotAdapter

    adapter = OneBotAdapter(bot_id="qq", credentials={"access_token": ACCESS_TOKEN})
    event = message_event(
        {"type": "reply", "data": {"id": "999"}},
        at(SELF_ID),
        text(" what is this "),
        at(40004),
        {"type": "image", "data": {"file": "abc.png", "url": "http://qq.example/abc.png", "file_size": "10"}},
        group=True,
    )

    update = adapter.event_update(event)

    assert update is not None
    assert update.envelope["input"]["text"] == "what is this @40004"
    assert update.envelope["data"]["reply_target"] == {
        "chat_id": f"group:{GROUP_ID}",
        "reply_to_message_id": str(event["message_id"]),
    }
    assert update.envelope["subject"]["data"]["quoted_message_id"] == "999"
    (image,) = update.files
    assert (image.name, image.mime_type, image.size, image.ref["url"]) == (
        "abc.png",
        "image/png",
        10,
        "http://qq.example/abc.png",
    )


class ImageHandler(PlatformHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        self.send_bytes(200, "image/png", PNG)


PNG = b"\x89PNG\r\n\x1a\n a small png"


@pytest.mark.django_db(transaction=True)
async def test_images_both_ways_an_image_in_becomes_an_input_artifact_and_a_run_image_is_sent_as_a_segment(
    onebot_bot_for, monkeypatch
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    bot = await _bot(onebot_bot_for)
    client = WebsocketCommunicator(application, ws_path(bot), headers=napcat_headers())
    assert (await client.connect())[0] is True

    with serving(FakePlatformServer(ImageHandler)) as images:
        picture = {"type": "image", "data": {"file": "abc.png", "url": f"{images.origin}/abc.png"}}
        await client.send_json_to(message_event(text("what is this?"), picture))
        event = await _until(lambda: EventLog.objects.first())
    (attachment,) = event.input["attachments"]
    artifact = await Artifact.objects.aget(artifact_id=attachment["artifact_id"])
    assert (artifact.name, artifact.mime_type, attachment["size"]) == ("abc.png", "image/png", len(PNG))

    run = await Run.objects.aget(event__event_id=event.event_id)
    made = await database_sync_to_async(artifact_create_from_bytes)(
        workspace=await database_sync_to_async(lambda: run.workspace)(),
        data=PNG,
        name="chart.png",
        mime_type="image/png",
        conversation_id=run.conversation_id,
        source=Artifact.Source.RUNNER,
    )
    created = RunEvent(type="artifact.created", data={"artifact_id": str(made.artifact_id), "name": "chart.png"})

    async def napcat_answers() -> list[dict[str, Any]]:
        calls = []
        for message_id in (1, 2):
            call = await client.receive_json_from(timeout=10)
            calls.append(call)
            await client.send_json_to(
                {"status": "ok", "retcode": 0, "data": {"message_id": message_id}, "echo": call["echo"]}
            )
        return calls

    answering = asyncio.create_task(napcat_answers())
    await _deliver(PlatformDeliveryPort(), run, ([created, _completed("a chart")], 0))
    text_call, image_call = await answering

    assert text_call["params"]["message"] == [{"type": "text", "data": {"text": "a chart"}}]
    (segment,) = image_call["params"]["message"]
    assert segment["type"] == "image"
    assert base64.b64decode(segment["data"]["file"].removeprefix("base64://")) == PNG
    delivery = await PlatformDelivery.objects.aget(run=run)
    assert (delivery.status, delivery.message_ids) == ("delivered", ["1", "2"])
    await client.disconnect()


def test_ctx_delivery_says_onebot_sends_whole_replies():
    qq = surface_delivery("qq")
    assert (qq.supports_streaming, qq.supports_edit, qq.supports_reaction) == (False, False, False)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_napcat_connected_to_daphne_gets_the_qa_runners_answer_as_a_send_msg_call(
    worker, start_web, qa_binding, onebot_bot_for
):
    cache.clear()
    bot = onebot_bot_for(qa_binding().workspace)
    web = start_web()
    url = web.url.replace("http://", "ws://") + ws_path(bot)
    headers = {"Authorization": f"Bearer {ACCESS_TOKEN}", "X-Self-ID": str(SELF_ID), "X-Client-Role": "Universal"}

    async def napcat() -> dict[str, Any]:
        async with websockets.connect(url, additional_headers=headers) as socket:
            await socket.send(json.dumps(message_event(at(SELF_ID), text(" qa:ok hi there"), group=True)))
            call = json.loads(await asyncio.wait_for(socket.recv(), timeout=30))
            await socket.send(
                json.dumps({"status": "ok", "retcode": 0, "data": {"message_id": 7}, "echo": call["echo"]})
            )
            async with httpx.AsyncClient() as http:
                call["healthz"] = (await http.get(f"{web.url}/healthz", timeout=10)).json()
            await asyncio.sleep(0.5)  # the worker records the delivery after the answer
            return call

    call = asyncio.run(napcat())

    run = _run_of(bot)
    assert run.status == Run.Status.COMPLETED
    assert call["action"] == "send_msg"
    params = call["params"]
    assert (params["message_type"], params["group_id"]) == ("group", GROUP_ID)
    reply, answer = params["message"]
    assert reply["type"] == "reply"
    assert answer == {"type": "text", "data": {"text": run.output}}
    assert _delivery_of(run).status == "delivered"
    connection = call["healthz"]["connections"][f"qq/{bot.workspace.slug}/{bot.bot_id}"]
    assert connection == "connected: QQ 10001"
    assert connection_label(connection_statuses([bot]).get(bot.pk)).startswith("disconnected")


async def test_an_image_url_at_an_internal_address_is_not_fetched_unless_the_operator_allowed_it():
    # The URL comes from the event, which whoever holds the bot's token writes: it must not make the host
    # fetch from its own network.
    with serving(FakePlatformServer(ImageHandler)) as images:
        ref = PlatformFileRef(ref={"url": f"{images.origin}/abc.png"}, name="abc.png", mime_type="image/png")
        guarded = OneBotAdapter(bot_id="b", credentials={"access_token": "t"}, allow_private=False)
        with pytest.raises(PlatformAPIError, match="refused"):
            await guarded.fetch_file(ref)

        allowed = OneBotAdapter(bot_id="b", credentials={"access_token": "t"}, allow_private=True)
        assert (await allowed.fetch_file(ref)).data == PNG
