"""A fake Satori server (aiohttp, on 127.0.0.1, its own loop and thread), with the path prefix Koishi's
server plugin uses: the HTTP API `POST /satori/v1/<method>` (`Authorization: Bearer <token>`, the login
named by `Satori-Platform` and `Satori-User-ID`; `message.create` answers a list of messages,
`message.update` and `reaction.create` nothing, `login.get` the login) and the event socket
`/satori/v1/events` on the same port: IDENTIFY (a wrong token is closed with 3000), READY with the logins,
PING answered by PONG, EVENT signals numbered by `sn`; an IDENTIFY carrying an `sn` gets the events after
it again (`replayed`). A test sends events (`send_event`, `message_created`, ...), raw frames
(`send_raw`), drops every connection (`drop`), and reads the messages the bot wrote (`texts`, `calls`).
Files are served at `/files/<name>`.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

TOKEN = "satori-fake-token"
PLATFORM = "onebot"
SELF_ID = "10001"
OTHER_SELF_ID = "10002"
USER_ID = "20002"
CHANNEL_ID = "30003"
GUILD_ID = "30003"
DIRECT_CHANNEL = f"private:{USER_ID}"


@dataclass
class Call:
    method: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float


class FakeSatori:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.messages: dict[str, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self.identifies: list[dict[str, Any]] = []
        self.replayed: list[int] = []
        self.pings = 0
        self.connected = threading.Semaphore(0)
        self.events: list[tuple[int, dict[str, Any]]] = []
        self._sn = itertools.count(1)
        self._ids = itertools.count(1)
        self._sockets: set[web.WebSocketResponse] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/satori"

    def start(self) -> None:
        self._thread.start()

        async def listen() -> None:
            app = web.Application()
            app.router.add_get("/satori/v1/events", self._events)
            app.router.add_post("/satori/v1/{method}", self._api)
            app.router.add_get("/files/{name}", self._file)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = self._runner.addresses[0][1]

        asyncio.run_coroutine_threadsafe(listen(), self._loop).result(5)

    def stop(self) -> None:
        async def close() -> None:
            for socket in list(self._sockets):
                await socket.close()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def __enter__(self) -> FakeSatori:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a test does ------------------------------------------------------------------------
    def wait_connected(self, timeout: float = 10) -> None:
        assert self.connected.acquire(timeout=timeout), "the bot did not connect"

    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return f"http://127.0.0.1:{self.port}/files/{name}"

    def event(self, kind: str, *, self_id: str = SELF_ID, direct: bool = False, **fields: Any) -> dict[str, Any]:
        """An EVENT signal's body of `kind`, for the login `self_id`."""
        body: dict[str, Any] = {
            "type": kind,
            "timestamp": int(time.time() * 1000) + next(self._ids),
            "login": {"platform": PLATFORM, "user": {"id": self_id}, "status": 1},
            "platform": PLATFORM,
            "self_id": self_id,
            "channel": {"id": DIRECT_CHANNEL, "type": 1} if direct else {"id": CHANNEL_ID, "type": 0},
            "user": {"id": USER_ID, "name": "ada"},
        }
        if not direct:
            body["guild"] = {"id": GUILD_ID, "name": "the group"}
        body.update(fields)
        return body

    def message_created(self, content: str, **options: Any) -> dict[str, Any]:
        message_id = str(options.pop("message_id", "") or f"m{next(self._ids)}")
        return self.event("message-created", message={"id": message_id, "content": content}, **options)

    def send_event(self, body: dict[str, Any]) -> None:
        """Number the event and send it to every identified connection (kept for replays)."""

        async def send() -> None:
            sn = next(self._sn)
            self.events.append((sn, body))
            for socket in list(self._sockets):
                await socket.send_str(json.dumps({"op": 0, "body": {"sn": sn, **body}}))

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(5)

    def send_raw(self, text: str) -> None:
        async def send() -> None:
            for socket in list(self._sockets):
                await socket.send_str(text)

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(5)

    def drop(self) -> None:
        """Cut every connection without a close frame (a network failure)."""

        async def drop_all() -> None:
            for socket in list(self._sockets):
                transport = socket._req.transport if socket._req is not None else None
                if transport is not None:
                    transport.abort()
            self._sockets.clear()

        asyncio.run_coroutine_threadsafe(drop_all(), self._loop).result(5)

    def texts(self, channel_id: str) -> list[str]:
        with self.lock:
            found = [m["content"] for m in self.messages.values() if m["channel_id"] == channel_id]
        return [html.unescape(re.sub(r"<quote[^>]*/>", "", content)) for content in found]

    def calls_of(self, *methods: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method in methods]

    # -- the server ------------------------------------------------------------------------------
    async def _events(self, request: web.Request) -> web.StreamResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        try:
            async for frame in socket:
                if frame.type != WSMsgType.TEXT:
                    break
                signal = json.loads(frame.data)
                if signal.get("op") == 3:
                    body = signal.get("body") or {}
                    if body.get("token") != self.token:
                        await socket.close(code=3000, message=b"invalid token")
                        break
                    self.identifies.append(body)
                    logins = [
                        {"platform": PLATFORM, "user": {"id": SELF_ID, "name": "langbot"}, "status": 1},
                        {"platform": PLATFORM, "user": {"id": OTHER_SELF_ID, "name": "other"}, "status": 1},
                    ]
                    await socket.send_str(json.dumps({"op": 4, "body": {"logins": logins, "proxy_urls": []}}))
                    if isinstance(body.get("sn"), int):
                        for sn, event in self.events:
                            if sn > body["sn"]:
                                self.replayed.append(sn)
                                await socket.send_str(json.dumps({"op": 0, "body": {"sn": sn, **event}}))
                    self._sockets.add(socket)
                    self.connected.release()
                elif signal.get("op") == 1:
                    self.pings += 1
                    await socket.send_str(json.dumps({"op": 2, "body": {}}))
        finally:
            self._sockets.discard(socket)
        return socket

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/pdf")

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = await request.json() if request.can_read_body else {}
        call = Call(method, body, {k.lower(): v for k, v in request.headers.items()}, time.monotonic())
        with self.lock:
            self.calls.append(call)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=401, text="unauthorized")
        if (request.headers.get("Satori-Platform"), request.headers.get("Satori-User-ID")) != (PLATFORM, SELF_ID):
            return web.Response(status=404, text="login not found")
        if method == "message.create":
            message_id = f"sent{next(self._ids)}"
            with self.lock:
                self.messages[message_id] = {"channel_id": body["channel_id"], "content": body["content"]}
            return web.json_response([{"id": message_id, "content": body["content"]}])
        if method == "message.update":
            with self.lock:
                found = self.messages.get(str(body.get("message_id")))
                if found is None or found["channel_id"] != body.get("channel_id"):
                    return web.Response(status=404, text="message not found")
                found["content"] = body["content"]
            return web.Response(status=200)
        if method == "reaction.create":
            return web.Response(status=200)
        if method == "login.get":
            return web.json_response({"platform": PLATFORM, "user": {"id": SELF_ID, "name": "langbot"}, "status": 1})
        return web.Response(status=404, text="no such method")
