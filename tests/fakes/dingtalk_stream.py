"""A fake DingTalk Stream-mode gateway: the WebSocket end of `POST /v1.0/gateway/connections/open` (served
by `tests/fakes/dingtalk_server.py`, which hands out the tickets this gateway takes once each).

It speaks the documented frames: pushes `{specVersion, type, headers: {topic, messageId, contentType,
time, appId}, data}` with `data` a JSON string (`CALLBACK` robot messages and card callbacks, `SYSTEM`
`ping` and `disconnect`), and records each acknowledgement (`{code, headers: {messageId}, message, data}`)
by message id. A test pushes a robot message and waits for its ack, drops the socket to see the client
open a new connection, or sends `disconnect`.

Runs on its own event loop in a thread, as the HTTP fakes run in theirs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import websockets
from websockets.asyncio.server import ServerConnection

from tests.fakes.dingtalk_server import CLIENT_ID, FakeDingTalk

TOPIC_ROBOT = "/v1.0/im/bot/messages/get"
TOPIC_CARD = "/v1.0/card/instances/callback"
WAIT_SECONDS = 10.0


class FakeDingTalkStream:
    def __init__(self, api: FakeDingTalk) -> None:
        self.api = api
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: Any = None
        self._ids = itertools.count(1)
        self.lock = threading.Lock()
        self.socket: ServerConnection | None = None
        self.connections = 0
        self.refused_tickets: list[str] = []
        self.used_tickets: set[str] = set()  # a ticket opens one connection only
        self.acks: dict[str, dict[str, Any]] = {}
        self.connected = threading.Event()

    # -- life -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

        async def serve() -> Any:
            return await websockets.serve(self._serve, "127.0.0.1", 0)

        self._server = asyncio.run_coroutine_threadsafe(serve(), self.loop).result(WAIT_SECONDS)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.api.stream_endpoint = f"ws://127.0.0.1:{port}/connect"

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(WAIT_SECONDS)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(WAIT_SECONDS)

    async def _serve(self, socket: ServerConnection) -> None:
        ticket = parse_qs(urlsplit(socket.request.path if socket.request else "").query).get("ticket", [""])[0]
        with self.lock:
            valid = ticket in self.api.tickets and ticket not in self.used_tickets
            if not valid:
                self.refused_tickets.append(ticket)
            else:
                self.used_tickets.add(ticket)
                self.connections += 1
                self.socket = socket
        if not valid:
            await socket.close(4001, "invalid ticket")
            return
        self.connected.set()
        try:
            async for raw in socket:
                answer = json.loads(raw)
                message_id = str((answer.get("headers") or {}).get("messageId") or "")
                with self.lock:
                    self.acks[message_id] = answer
        except websockets.ConnectionClosed:
            pass
        finally:
            with self.lock:
                if self.socket is socket:
                    self.socket = None
                    self.connected.clear()

    # -- what a test does -----------------------------------------------------------------------
    def wait_connected(self, connections: int = 1, *, timeout: float = WAIT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while not (self.connected.is_set() and self.connections >= connections):
            assert time.monotonic() < deadline, "the client did not connect"
            time.sleep(0.02)

    def _send(self, frame: dict[str, Any]) -> None:
        self.send_raw(json.dumps(frame, ensure_ascii=False))

    def send_raw(self, text: str) -> None:
        """One text frame as it is (a test's junk)."""
        socket = self.socket
        assert socket is not None, "no client connected"
        asyncio.run_coroutine_threadsafe(socket.send(text), self.loop).result(WAIT_SECONDS)

    def push(self, kind: str, topic: str, data: Any) -> str:
        """Push one frame; its message id (the ack names it)."""
        message_id = f"msg-{next(self._ids):06d}"
        self._send(
            {
                "specVersion": "1.0",
                "type": kind,
                "headers": {
                    "appId": CLIENT_ID,
                    "contentType": "application/json",
                    "messageId": message_id,
                    "time": str(int(time.time() * 1000)),
                    "topic": topic,
                },
                "data": data if isinstance(data, str) else json.dumps(data, ensure_ascii=False),
            }
        )
        return message_id

    def push_message(self, message: dict[str, Any]) -> str:
        return self.push("CALLBACK", TOPIC_ROBOT, message)

    def ack(self, message_id: str) -> dict[str, Any]:
        """The client's acknowledgement of a pushed frame (waits for it)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            with self.lock:
                if message_id in self.acks:
                    return self.acks[message_id]
            assert time.monotonic() < deadline, f"{message_id} was not acknowledged"
            time.sleep(0.02)

    def drop(self) -> None:
        """Close the client's socket abruptly (no close frame), as a network failure would."""
        socket = self.socket
        assert socket is not None
        self.loop.call_soon_threadsafe(socket.transport.abort)


@contextmanager
def stream_serving(api: FakeDingTalk) -> Iterator[FakeDingTalkStream]:
    gateway = FakeDingTalkStream(api)
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()
