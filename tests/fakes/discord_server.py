"""A fake Discord: the REST API (`/api/v10/...`, `Authorization: Bot <token>`) and the gateway (a WebSocket
speaking op codes HELLO 10, IDENTIFY 2, RESUME 6, HEARTBEAT 1 / ACK 11, DISPATCH 0 with READY, RESUMED and
MESSAGE_CREATE), both on 127.0.0.1; `GET /api/v10/gateway/bot` names the fake gateway.

It keeps each channel's messages as Discord would (`messages`: the bot's current content by channel), records
every REST call with its time (`calls`), answers the next call of a route with a 429 and `retry_after`
(`rate_limit_next`) or carries it out and hangs up without answering (`hang_up_after_next`), serves
attachments at `/attachments/<id>/<name>`, and lets a test dispatch a user's message to the connected bot
(`send_message`), drop the connection (`drop`) or stop acknowledging heartbeats (`ack_heartbeats`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAw.fake.discord-token"
BOT_USER_ID = "1000000000000000001"
HEARTBEAT_INTERVAL_MS = 500
_SNOWFLAKE = re.compile(r"/\d+")


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any]
    at: float
    status: int = 200
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)

    @property
    def route(self) -> str:
        path = _SNOWFLAKE.sub("/{id}", self.path)
        return f"{self.method} {path}"


@dataclass
class Message:
    channel_id: str
    message_id: str
    content: str = ""
    reference: str | None = None
    files: list[tuple[str, bytes]] = field(default_factory=list)


class FakeDiscord(FakePlatformServer):
    def __init__(self, token: str = TOKEN) -> None:
        super().__init__(DiscordHandler)
        self.token = token
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.sent: list[Message] = []
        self.failures: dict[str, deque[float]] = {}
        self.attachments: dict[str, tuple[str, bytes]] = {}
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.ack_heartbeats = True
        self.ready = threading.Semaphore(0)
        self._ids = itertools.count(2_000_000_000_000_000_000)
        self._loop = asyncio.new_event_loop()
        self._sockets: set[ServerConnection] = set()
        self._gateway_port = 0
        self._gateway_thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._gateway: Any = None
        self._seq = itertools.count(1)

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def api_base_url(self) -> str:
        return f"{self.origin}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._gateway_port}"

    def start(self) -> None:
        super().start()
        self._gateway_thread.start()

        async def listen() -> Any:
            return await serve(self._session, "127.0.0.1", 0)

        self._gateway = asyncio.run_coroutine_threadsafe(listen(), self._loop).result(5)
        self._gateway_port = self._gateway.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            self._gateway.close()
            await self._gateway.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        super().stop()

    # -- what a test does ------------------------------------------------------------------------
    def next_id(self) -> str:
        return str(next(self._ids))

    def rate_limit_next(self, route: str, retry_after: float) -> None:
        """Answer the next call of `route` (e.g. `POST /channels/{id}/messages`) with a 429."""
        self.failures.setdefault(route, deque()).append(retry_after)

    def add_attachment(self, name: str, data: bytes, content_type: str) -> dict[str, Any]:
        attachment_id = self.next_id()
        self.attachments[attachment_id] = (name, data)
        return {
            "id": attachment_id,
            "filename": name,
            "size": len(data),
            "url": f"{self.origin}/attachments/{attachment_id}/{name}",
            "proxy_url": f"{self.origin}/attachments/{attachment_id}/{name}",
            "content_type": content_type,
        }

    def wait_ready(self, timeout: float = 10) -> None:
        """Wait until a session (a new one or a resumed one) is ready."""
        assert self.ready.acquire(timeout=timeout), "the bot did not connect to the gateway"

    def message_create(
        self,
        content: str,
        *,
        channel_id: str = "300000000000000001",
        guild_id: str | None = None,
        author_id: str = "400000000000000001",
        bot: bool = False,
        mention_bot: bool = False,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE dispatch's `d`, as the gateway sends it."""
        message: dict[str, Any] = {
            "id": self.next_id(),
            "channel_id": channel_id,
            "author": {"id": author_id, "username": "ada", "discriminator": "0", "global_name": "Ada", "bot": bot},
            "content": content,
            "timestamp": "2026-11-25T10:00:00.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [{"id": BOT_USER_ID, "username": "langbot", "bot": True}] if mention_bot else [],
            "mention_roles": [],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "type": 0,
        }
        if guild_id:
            message["guild_id"] = guild_id
            message["member"] = {"roles": [], "joined_at": "2026-01-01T00:00:00+00:00"}
        return message

    def send_message(self, message: dict[str, Any]) -> None:
        """Dispatch a MESSAGE_CREATE to every connected session."""
        self._broadcast({"t": "MESSAGE_CREATE", "d": message})

    def dispatch(self, kind: str, data: dict[str, Any]) -> None:
        """Dispatch any event (`MESSAGE_REACTION_ADD`, `INTERACTION_CREATE`, ...) to every session."""
        self._broadcast({"t": kind, "d": data})

    def slash_command(
        self, name: str, *options: tuple[str, Any], channel_id: str = "300000000000000001", guild_id: str = ""
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE's `d` for a chat-input (slash) command, as the gateway sends it."""
        user = {"id": "400000000000000001", "username": "ada", "global_name": "Ada"}
        interaction: dict[str, Any] = {
            "id": self.next_id(),
            "application_id": BOT_USER_ID,
            "type": 2,
            # Unique across test runs: the host remembers which interactions it has answered in the cache.
            "token": f"aW50ZXJhY3Rpb24{secrets.token_hex(8)}tokEN",
            "version": 1,
            "channel_id": channel_id,
            "data": {
                "id": self.next_id(),
                "name": name,
                "type": 1,
                "options": [{"name": k, "type": 3, "value": v} for k, v in options],
            },
        }
        if guild_id:
            interaction["guild_id"] = guild_id
            interaction["member"] = {"user": user, "roles": []}
        else:
            interaction["user"] = user
        return interaction

    def interaction_texts(self, token: str) -> list[str]:
        """What the bot wrote through an interaction's webhook: the original response first, then the
        follow-ups."""
        with self.lock:
            return [m.content for m in self.sent if m.channel_id == f"interaction:{token}"]

    def drop(self) -> None:
        """Close every gateway connection without a close frame (a network failure)."""

        async def drop_all() -> None:
            for socket in list(self._sockets):
                socket.transport.abort()

        asyncio.run_coroutine_threadsafe(drop_all(), self._loop).result(5)

    def texts(self, channel_id: str) -> list[str]:
        with self.lock:
            return [m.content for m in self.sent if m.channel_id == channel_id and m.content]

    def calls_of(self, *routes: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.route in routes]

    # -- the gateway ----------------------------------------------------------------------------
    def _broadcast(self, frame: dict[str, Any]) -> None:
        async def send() -> None:
            for socket in list(self._sockets):
                await socket.send(json.dumps({"op": 0, "s": next(self._seq), **frame}))

        asyncio.run_coroutine_threadsafe(send(), self._loop).result(5)

    async def _session(self, socket: ServerConnection) -> None:
        try:
            await self._frames(socket)
        except ConnectionClosed:
            pass  # dropped (`drop`), as a network failure would
        finally:
            self._sockets.discard(socket)

    async def _frames(self, socket: ServerConnection) -> None:
        await socket.send(json.dumps({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_INTERVAL_MS}, "s": None}))
        async for raw in socket:
            frame = json.loads(raw)
            op, data = frame.get("op"), frame.get("d")
            if op == 1:
                self.heartbeats += 1
                if self.ack_heartbeats:
                    await socket.send(json.dumps({"op": 11}))
            elif op in (2, 6) and data.get("token") != self.token:
                await socket.close(4004, "Authentication failed.")
                return
            elif op == 2:
                self.identifies.append(data)
                self._sockets.add(socket)
                ready = {
                    "v": 10,
                    "user": {"id": BOT_USER_ID, "username": "langbot", "discriminator": "0", "bot": True},
                    "guilds": [],
                    "session_id": f"session-{len(self.identifies)}",
                    "resume_gateway_url": self.gateway_url,
                    "application": {"id": BOT_USER_ID, "flags": 0},
                }
                await socket.send(json.dumps({"op": 0, "t": "READY", "s": next(self._seq), "d": ready}))
                self.ready.release()
            elif op == 6:
                self.resumes.append(data)
                self._sockets.add(socket)
                await socket.send(json.dumps({"op": 0, "t": "RESUMED", "s": next(self._seq), "d": None}))
                self.ready.release()


class DiscordHandler(PlatformHandler):
    fake: FakeDiscord

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        if self.path_only.startswith("/attachments/"):
            attachment_id = self.path_only.split("/")[2]
            name, data = self.fake.attachments.get(attachment_id, ("", b""))
            if not name:
                self.send_json(404, {"message": "Not Found", "code": 0})
            else:
                self.send_bytes(200, "application/octet-stream", data)
            return
        self._api("GET", b"")

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        self._api("POST", self.read_body())

    def do_PATCH(self) -> None:  # noqa: N802 (http.server names it)
        self._api("PATCH", self.read_body())

    def do_PUT(self) -> None:  # noqa: N802 (http.server names it)
        self._api("PUT", self.read_body())

    def _api(self, method: str, raw: bytes) -> None:
        path = self.path_only.removeprefix("/api/v10")
        body: dict[str, Any] = {}
        files: dict[str, tuple[str, bytes]] = {}
        if self.headers.get("content-type", "").startswith("multipart/form-data"):
            for name, part in self.form_parts(raw).items():
                payload = part.get_payload(decode=True)
                content = payload if isinstance(payload, bytes) else b""
                if name == "payload_json":
                    body = json.loads(content)
                else:
                    files[name] = (part.get_filename() or "file", content)
        elif raw:
            body = json.loads(raw)
        call = Call(method, path, body, time.monotonic(), files=files)
        with self.fake.lock:
            self.fake.calls.append(call)
        if self.headers.get("authorization") != f"Bot {self.fake.token}":
            call.status = 401
            self.send_json(401, {"message": "401: Unauthorized", "code": 0})
            return
        pending = self.fake.failures.get(call.route)
        if pending:
            retry_after = pending.popleft()
            call.status = 429
            self.send_json(429, {"message": "You are being rate limited.", "retry_after": retry_after, "global": False})
            return
        status, answer = self._answer(call)
        call.status = status
        if self.fake.take_hang_up(call.route):
            self.hang_up()
            return
        if status == 204:
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_json(status, answer)

    def _answer(self, call: Call) -> tuple[int, Any]:
        fake = self.fake
        parts = call.path.strip("/").split("/")
        if call.path == "/gateway/bot":
            return 200, {
                "url": fake.gateway_url,
                "shards": 1,
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1},
            }
        if call.path == "/users/@me":
            return 200, {"id": BOT_USER_ID, "username": "langbot", "bot": True}
        if call.method == "POST" and len(parts) == 3 and parts[0] == "channels" and parts[2] == "messages":
            content = str(call.body.get("content") or "")
            if len(content) > 2000:
                return 400, {"message": "Invalid Form Body", "code": 50035}
            reference = (call.body.get("message_reference") or {}).get("message_id")
            message = Message(parts[1], fake.next_id(), content, reference, list(call.files.values()))
            with fake.lock:
                fake.sent.append(message)
            return 200, {"id": message.message_id, "channel_id": parts[1], "content": content, "type": 0}
        if call.method == "PATCH" and len(parts) == 4 and parts[0] == "channels":
            content = str(call.body.get("content") or "")
            if len(content) > 2000:
                return 400, {"message": "Invalid Form Body", "code": 50035}
            with fake.lock:
                found = next((m for m in fake.sent if m.message_id == parts[3] and m.channel_id == parts[1]), None)
                if found is None:
                    return 404, {"message": "Unknown Message", "code": 10008}
                found.content = content
            return 200, {"id": parts[3], "channel_id": parts[1], "content": content}
        if call.method == "PUT" and "reactions" in parts:
            return 204, None
        if call.method == "POST" and len(parts) == 4 and parts[0] == "interactions" and parts[3] == "callback":
            return 204, None
        if parts[0] == "webhooks" and len(parts) >= 3:
            return self._interaction_webhook(call, parts)
        return 404, {"message": "404: Not Found", "code": 0}

    def _interaction_webhook(self, call: Call, parts: list[str]) -> tuple[int, Any]:
        """An interaction's webhook: `PATCH …/messages/@original` writes the deferred response (only
        after the callback deferred it), `POST` adds a follow-up, `PATCH …/messages/<id>` edits either."""
        fake = self.fake
        token = parts[2]
        chat = f"interaction:{token}"
        content = str(call.body.get("content") or "")
        with fake.lock:
            deferred = any(c.route.startswith("POST /interactions/") and token in c.path for c in fake.calls)
            if not deferred:
                return 404, {"message": "Unknown interaction", "code": 10062}
            if call.method == "POST" and len(parts) == 3:
                message = Message(chat, fake.next_id(), content)
                fake.sent.append(message)
                return 200, {"id": message.message_id, "channel_id": chat, "content": content}
            if call.method != "PATCH" or len(parts) != 5 or parts[3] != "messages":
                return 404, {"message": "404: Not Found", "code": 0}
            wanted = parts[4]
            if wanted == "@original":
                # The deferred response is a message from the start ("thinking…"): the first in its chat.
                found = next((m for m in fake.sent if m.channel_id == chat and m.reference == "original"), None)
                if found is None:
                    found = Message(chat, fake.next_id(), reference="original")
                    fake.sent.append(found)
            else:
                found = next((m for m in fake.sent if m.channel_id == chat and m.message_id == wanted), None)
            if found is None:
                return 404, {"message": "Unknown Message", "code": 10008}
            found.content = content
            return 200, {"id": found.message_id, "channel_id": chat, "content": content}
