"""A fake KOOK: the HTTP API v3 (`/api/v3/...`, `Authorization: Bot <token>`, answers `{"code", "message",
"data"}`) and the WebSocket gateway it names at `GET /api/v3/gateway/index?compress=0`, both on 127.0.0.1.

The gateway speaks KOOK's signals: HELLO (`s: 1` with a `session_id`; `code` 40101 for a wrong token in the
URL), PING `s: 2` with the client's last `sn` answered by PONG `s: 3` (unless `answer_pings` is off),
events `s: 0` numbered by `sn` per session, RECONNECT `s: 5` (`ask_reconnect`), and resuming: a connection
whose URL says `resume=1&sn=…&sessionId=…` of a known session gets the same session back, the events
after that `sn` (sent while it was away) and RESUME ACK `s: 6`. `drop()` cuts every connection
without a close frame. The API records every call (`calls`), keeps the bot's messages by id (`messages`),
answers the next call of a path with a 429 (`rate_limit_next`) and serves files at `/files/<name>`.

`SocketFake` (the gateway's thread, loop, connections, broadcasting and dropping) serves the Satori fake too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

TOKEN = "1/MTAwMDA=/fake-kook-token=="
BOT_USER_ID = "1000001"
BOT_USERNAME = "langbot"
USER_ID = "2000002"
CHANNEL_ID = "3000003"
GUILD_ID = "4000004"


class SocketFake(FakePlatformServer):
    """A fake platform's HTTP side plus a WebSocket server on its own loop and thread; subclasses implement
    `_socket(socket)` (one connection's life)."""

    def __init__(self, handler: type[PlatformHandler]) -> None:
        super().__init__(handler)
        self.lock = threading.Lock()
        self.connected = threading.Semaphore(0)
        self._loop = asyncio.new_event_loop()
        self._sockets: set[ServerConnection] = set()
        self._socket_port = 0
        self._socket_thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._socket_server: Any = None

    @property
    def socket_origin(self) -> str:
        return f"ws://127.0.0.1:{self._socket_port}"

    def start(self) -> None:
        super().start()
        self._socket_thread.start()

        async def listen() -> Any:
            return await serve(self._serve, "127.0.0.1", 0)

        self._socket_server = asyncio.run_coroutine_threadsafe(listen(), self._loop).result(5)
        self._socket_port = self._socket_server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            self._socket_server.close()
            await self._socket_server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        super().stop()

    def wait_connected(self, timeout: float = 10) -> None:
        """Wait until a client connected (and, for the platform, is ready to get events)."""
        assert self.connected.acquire(timeout=timeout), "the bot did not connect"

    def drop(self) -> None:
        """Close every connection without a close frame (a network failure)."""

        async def drop_all() -> None:
            for socket in list(self._sockets):
                socket.transport.abort()

        asyncio.run_coroutine_threadsafe(drop_all(), self._loop).result(5)

    def send_all(self, frame: Any) -> None:
        """Send one frame (JSON, or raw text when a string) to every ready connection."""

        async def send() -> None:
            for socket in list(self._sockets):
                await socket.send(frame if isinstance(frame, str) else json.dumps(frame))

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(5)

    def run_soon(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(5)

    async def _serve(self, socket: ServerConnection) -> None:
        try:
            await self._socket(socket)
        except ConnectionClosed:
            pass  # dropped (`drop`), as a network failure would
        finally:
            self._sockets.discard(socket)

    async def _socket(self, socket: ServerConnection) -> None:
        raise NotImplementedError


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any]
    at: float
    status: int = 200


@dataclass
class Session:
    session_id: str
    sn: itertools.count[int]
    sent: list[tuple[int, dict[str, Any]]]


class FakeKook(SocketFake):
    def __init__(self, token: str = TOKEN) -> None:
        super().__init__(KookHandler)
        self.token = token
        self.calls: list[Call] = []
        self.messages: dict[str, dict[str, Any]] = {}
        self.failures: dict[str, deque[float]] = {}
        self.files: dict[str, bytes] = {}
        self.answer_pings = True
        self.pings: list[int] = []
        self.hellos = 0
        self.resumes: list[int] = []
        self.sessions: dict[str, Session] = {}
        self._current: Session | None = None
        self._ids = itertools.count(1)

    @property
    def api_base_url(self) -> str:
        return f"{self.origin}/api/v3"

    # -- what a test does ------------------------------------------------------------------------
    def rate_limit_next(self, path: str, seconds: float) -> None:
        self.failures.setdefault(path, deque()).append(seconds)

    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return f"{self.origin}/files/{name}"

    def message(
        self,
        content: str,
        *,
        channel_type: str = "GROUP",
        author_id: str = USER_ID,
        mention: list[str] | None = None,
        kind: int = 9,
        bot: bool = False,
        msg_id: str = "",
        attachments: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A message event's `d`, as the gateway sends it."""
        extra: dict[str, Any] = {
            "type": kind,
            "author": {"id": author_id, "username": "ada", "nickname": "Ada", "identify_num": "0001", "bot": bot},
            "mention": mention or [],
            "mention_all": False,
            "mention_roles": [],
            "mention_here": False,
        }
        if channel_type == "GROUP":
            extra |= {"guild_id": GUILD_ID, "channel_name": "general"}
        if attachments:
            extra["attachments"] = attachments
        return {
            "channel_type": channel_type,
            "type": kind,
            "target_id": CHANNEL_ID if channel_type == "GROUP" else BOT_USER_ID,
            "author_id": author_id,
            "content": content,
            "msg_id": msg_id or f"6f1a2b3c-0000-4000-8000-{next(self._ids):012d}",
            "msg_timestamp": int(time.time() * 1000),
            "nonce": "",
            "extra": extra,
        }

    def system(self, name: str, body: dict[str, Any], *, channel_type: str = "GROUP") -> dict[str, Any]:
        """A system event's `d` (`type` 255, `extra.type` naming it)."""
        return {
            "channel_type": channel_type,
            "type": 255,
            "target_id": GUILD_ID if channel_type == "GROUP" else BOT_USER_ID,
            "author_id": "1",
            "content": "[系统消息]",
            "msg_id": f"5e1a2b3c-0000-4000-8000-{next(self._ids):012d}",
            "msg_timestamp": int(time.time() * 1000),
            "nonce": "",
            "extra": {"type": name, "body": body},
        }

    def send_event(self, data: dict[str, Any]) -> None:
        """Hand one event to the current session: sent now when connected, on RESUME when not."""

        async def send() -> None:
            session = self._current
            assert session is not None, "no gateway session yet"
            sn = next(session.sn)
            session.sent.append((sn, data))
            for socket in list(self._sockets):
                await socket.send(json.dumps({"s": 0, "sn": sn, "d": data}))

        self.run_soon(send())

    def send_raw(self, text: str) -> None:
        self.send_all(text)

    def ask_reconnect(self) -> None:
        self.send_all({"s": 5, "d": {"code": 41008, "err": "Missing params"}})

    def texts(self, target_id: str) -> list[str]:
        with self.lock:
            return [m["content"] for m in self.messages.values() if m["target_id"] == target_id]

    def calls_of(self, *paths: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.path in paths]

    # -- the gateway -----------------------------------------------------------------------------
    async def _socket(self, socket: ServerConnection) -> None:
        query = {k: v[0] for k, v in parse_qs(urlsplit(socket.request.path if socket.request else "").query).items()}
        if query.get("token") != self.token:
            await socket.send(json.dumps({"s": 1, "d": {"code": 40101}}))
            return
        known = self.sessions.get(query.get("sessionId", ""))
        if query.get("resume") == "1" and known is not None:
            await socket.send(json.dumps({"s": 1, "d": {"code": 0, "session_id": known.session_id}}))
            self.resumes.append(int(query["sn"]))
            for sn, data in known.sent:
                if sn > int(query["sn"]):
                    await socket.send(json.dumps({"s": 0, "sn": sn, "d": data}))
            await socket.send(json.dumps({"s": 6, "d": {"session_id": known.session_id}}))
            self._current = known
        else:
            self.hellos += 1
            session = Session(f"session-{self.hellos}", itertools.count(1), [])
            self.sessions[session.session_id] = session
            self._current = session
            await socket.send(json.dumps({"s": 1, "d": {"code": 0, "session_id": session.session_id}}))
        self._sockets.add(socket)
        self.connected.release()
        async for raw in socket:
            frame = json.loads(raw)
            if frame.get("s") == 2:
                self.pings.append(int(frame.get("sn") or 0))
                if self.answer_pings:
                    await socket.send(json.dumps({"s": 3}))


class KookHandler(PlatformHandler):
    fake: FakeKook

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        if self.path_only.startswith("/files/"):
            data = self.fake.files.get(self.path_only.removeprefix("/files/"))
            if data is None:
                self.send_json(404, {"code": 404, "message": "not found"})
            else:
                self.send_bytes(200, "application/pdf", data)
            return
        self._api("GET", {})

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        raw = self.read_body()
        self._api("POST", json.loads(raw) if raw else {})

    def _api(self, method: str, body: dict[str, Any]) -> None:
        fake = self.fake
        path = self.path_only.removeprefix("/api/v3")
        call = Call(method, path, body, time.monotonic())
        with fake.lock:
            fake.calls.append(call)
        if self.headers.get("authorization") != f"Bot {fake.token}":
            call.status = 401
            self.send_json(401, {"code": 401, "message": "你的用户凭证不正确", "data": {}})
            return
        pending = fake.failures.get(path)
        if pending:
            call.status = 429
            self.send_response(429)
            self.send_header("X-Rate-Limit-Reset", str(pending.popleft()))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_json(200, {"code": 0, "message": "操作成功", "data": self._answer(path, body)})

    def _answer(self, path: str, body: dict[str, Any]) -> Any:
        fake = self.fake
        if path == "/gateway/index":
            assert self.query_params().get("compress") == "0"
            return {"url": f"{fake.socket_origin}/gateway?compress=0&token={fake.token}"}
        if path == "/user/me":
            return {"id": BOT_USER_ID, "username": BOT_USERNAME, "identify_num": "4242", "bot": True}
        if path in ("/message/create", "/direct-message/create"):
            msg_id = f"7b1a2b3c-0000-4000-8000-{next(fake._ids):012d}"
            with fake.lock:
                fake.messages[msg_id] = {**body, "direct": path.startswith("/direct")}
            return {"msg_id": msg_id, "msg_timestamp": int(time.time() * 1000), "nonce": ""}
        if path in ("/message/update", "/direct-message/update"):
            with fake.lock:
                found = fake.messages.get(str(body.get("msg_id")))
                if found is not None:
                    found["content"] = body["content"]
            return []
        return []
