"""A chat WebSocket client that stops reading, against a real daphne: the server stops sending to it once
the socket buffers are full, closes it with 4408 after `LANGBOT_WS_SEND_STALL_SECONDS`, and a client that
reads again gets what was sent before the close and then the documented 4408 close — not a TCP reset.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from websockets.typing import Origin

from bindings.services import api_key_create
from runners.live.publish import conversation_group
from tests.factories import WorkspaceFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

CONVERSATION = "slow-reader"
ITEM_BYTES = 64 * 1024
FLOOD = 400  # 25 MiB: far more than the loopback socket buffers hold


def _workspace_with_key() -> tuple[int, str]:
    workspace = WorkspaceFactory.create()
    _, key = api_key_create(workspace=workspace)
    return workspace.pk, key


def _item(n: int) -> dict[str, object]:
    return {"type": "transcript.item", "action": "created", "item": {"n": n, "content": "x" * ITEM_BYTES}}


async def test_a_client_that_stops_reading_gets_the_4408_close_when_it_reads_again(start_web) -> None:
    web = start_web(LANGBOT_WS_SEND_STALL_SECONDS="1", LANGBOT_WS_CLOSE_WAIT_SECONDS="30")
    workspace_id, key = await sync_to_async(_workspace_with_key)()
    auth = {"Authorization": f"Bearer {key}"}
    layer = get_channel_layer()
    group = conversation_group(workspace_id=workspace_id, conversation_id=CONVERSATION)
    async with httpx.AsyncClient(base_url=web.url, timeout=30) as http:
        # The conversation exists once an event of it is in (no binding is needed for that).
        posted = await http.post("/api/v1/events", json={"conversation_id": CONVERSATION, "input": {"text": "hi"}},
                                 headers=auth)  # fmt: skip
        assert posted.status_code in (200, 202), posted.text
        ticket = await http.post("/api/v1/ws-tickets", headers=auth)
        assert ticket.status_code == 201, ticket.text
    url = web.url.replace("http://", "ws://") + ticket.json()["url"]
    # max_queue=1: the client library stops reading the socket as soon as one message waits unread.
    async with websockets.connect(url, origin=Origin(web.url), max_queue=1, max_size=None) as socket:
        await socket.send(json.dumps({"type": "subscribe", "conversation_id": CONVERSATION}))
        # Subscribed once a published item arrives.
        while True:
            await layer.group_send(group, _item(-1))
            try:
                first = json.loads(await asyncio.wait_for(socket.recv(), 1))
            except TimeoutError:
                continue
            if first.get("type") == "transcript.item":
                break

        # The client stops reading; the server is sent far more than the socket buffers hold.
        for n in range(FLOOD):
            await layer.group_send(group, _item(n))
        await asyncio.sleep(4)  # past the stall limit: the server has given up on this client by now

        received = []
        closed: websockets.ConnectionClosed | None = None
        while closed is None:
            try:
                received.append(json.loads(await asyncio.wait_for(socket.recv(), 20)))
            except websockets.ConnectionClosed as exc:
                closed = exc

    assert closed.rcvd is not None, "the connection was reset instead of closed"
    assert closed.rcvd.code == 4408
    numbers = [m["item"]["n"] for m in received if m.get("type") == "transcript.item" and m["item"]["n"] >= 0]
    assert numbers == sorted(numbers)
    assert len(numbers) < FLOOD
    assert "ERROR" not in web.log()
