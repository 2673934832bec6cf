"""A fake Lark / Feishu Open Platform speaking its wire format: `POST /open-apis/auth/v3/tenant_access_token/
internal` sells tenant tokens, the `im/v1` routes (messages create / reply / PATCH, images, files, message
resources, reactions) take `Authorization: Bearer <tenant token>` and answer `{"code": 0, "msg":
"success", "data": {...}}` or a non-zero `code` (a 429 with `x-ogw-ratelimit-reset`).

It keeps the chats as the platform would (`sent`: each bot message's current card text or file), records
every call with its time (`calls`), can answer the next call of a route with a 429 (`rate_limit_next`), and
builds real-shaped event subscription v2 pushes, encrypted and signed as the platform sends them.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

APP_ID = "cli_a1b2c3d4e5f6"
APP_SECRET = "fake-app-secret-0123456789"
VERIFICATION_TOKEN = "verification-token-1"
ENCRYPT_KEY = "encrypt-key-1"
BOT_OPEN_ID = "ou_bot0000000000000000000000000"


@dataclass
class Call:
    route: str
    params: dict[str, Any]
    at: float
    status: int = 200
    code: int = 0


@dataclass
class Message:
    chat_id: str
    message_id: str
    msg_type: str
    content: dict[str, Any]
    parent_id: str = ""
    in_thread: bool = False
    file_name: str = ""
    file_bytes: bytes = b""

    @property
    def text(self) -> str:
        """The Markdown a card shows."""
        return "".join(e.get("content", "") for e in self.content.get("elements", []) if e.get("tag") == "markdown")


def encrypt(payload: dict[str, Any], key: str = ENCRYPT_KEY) -> dict[str, str]:
    """`{"encrypt": ...}` as the platform sends a push when the app has an encrypt key: AES-256-CBC with
    sha256(key), a random IV in front, PKCS#7 padding, Base64."""
    padder = padding.PKCS7(128).padder()
    plain = padder.update(json.dumps(payload).encode()) + padder.finalize()
    iv = os.urandom(16)
    encryptor = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(iv)).encryptor()
    sealed = encryptor.update(plain) + encryptor.finalize()
    return {"encrypt": base64.b64encode(iv + sealed).decode()}


def sign(body: bytes, key: str = ENCRYPT_KEY, *, timestamp: str | None = None, nonce: str = "n0nce") -> dict[str, str]:
    """The headers the platform signs a push with: sha256(timestamp + nonce + encrypt key + body), hex."""
    stamp = timestamp or str(int(time.time()))
    digest = hashlib.sha256((stamp + nonce + key).encode() + body).hexdigest()
    return {"X-Lark-Request-Timestamp": stamp, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": digest}


class FakeLark(FakePlatformServer):
    def __init__(self, app_id: str = APP_ID, app_secret: str = APP_SECRET) -> None:
        super().__init__(LarkHandler)
        self.app_id = app_id
        self.app_secret = app_secret
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.sent: list[Message] = []
        self.tokens: list[str] = []
        self.resources: dict[tuple[str, str], tuple[str, str, bytes]] = {}  # (message, key) -> (name, mime, data)
        self.uploads: dict[str, tuple[str, bytes]] = {}  # image_key / file_key -> (name, data)
        self.user_messages: dict[str, str] = {}  # message_id -> chat_id of the pushes built here
        self.failures: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        self._ids = itertools.count(1)

    # -- what a test sets up ---------------------------------------------------------------------
    def rate_limit_next(self, route: str, reset: int) -> None:
        body = {"code": 99991400, "msg": "request trigger frequency limit"}
        headers = {"x-ogw-ratelimit-limit": "5", "x-ogw-ratelimit-reset": str(reset)}
        self.failures.setdefault(route, []).append((429, body, headers))

    def add_resource(self, message_id: str, key: str, name: str, mime_type: str, data: bytes) -> None:
        self.resources[(message_id, key)] = (name, mime_type, data)

    def message_event(
        self,
        text: str | None = "hello",
        *,
        chat_id: str = "oc_p2pchat",
        chat_type: str = "p2p",
        open_id: str = "ou_ada",
        event_id: str | None = None,
        message_id: str | None = None,
        message_type: str = "text",
        content: dict[str, Any] | None = None,
        mentions: list[dict[str, Any]] | None = None,
        thread_id: str | None = None,
        sender_type: str = "user",
    ) -> dict[str, Any]:
        """An `im.message.receive_v1` push of event subscription schema 2.0 (before encryption)."""
        now_ms = str(int(time.time() * 1000))
        message: dict[str, Any] = {
            "message_id": message_id or f"om_{next(self._ids):08d}",
            "create_time": now_ms,
            "update_time": now_ms,
            "chat_id": chat_id,
            "chat_type": chat_type,
            "message_type": message_type,
            "content": json.dumps(content if content is not None else {"text": text}, ensure_ascii=False),
            "user_agent": "Mozilla/5.0 Lark/7.0",
        }
        if mentions:
            message["mentions"] = mentions
        self.user_messages[message["message_id"]] = chat_id
        if thread_id:
            message.update(root_id="om_root", parent_id="om_root", thread_id=thread_id)
        return {
            "schema": "2.0",
            "header": {
                "event_id": event_id or f"{next(self._ids):032x}",
                "token": VERIFICATION_TOKEN,
                "create_time": now_ms,
                "event_type": "im.message.receive_v1",
                "tenant_key": "tenant-1",
                "app_id": self.app_id,
            },
            "event": {
                "sender": {
                    "sender_id": {"union_id": "on_ada", "user_id": "ada", "open_id": open_id},
                    "sender_type": sender_type,
                    "tenant_key": "tenant-1",
                },
                "message": message,
            },
        }

    @staticmethod
    def bot_mention(key: str = "@_user_1") -> dict[str, Any]:
        return {
            "key": key,
            "id": {"open_id": BOT_OPEN_ID, "union_id": "on_bot", "user_id": ""},
            "name": "LangBot",
            "tenant_key": "tenant-1",
        }

    # -- what a test reads -----------------------------------------------------------------------
    def texts(self, chat_id: str) -> list[str]:
        with self.lock:
            return [m.text for m in self.sent if m.chat_id == chat_id and m.msg_type == "interactive"]

    def calls_of(self, *routes: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.route in routes]

    # -- the API ---------------------------------------------------------------------------------
    def record(self, route: str, params: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """A queued failure for the route (recorded), else None after recording a success."""
        with self.lock:
            queued = self.failures.get(route)
            if queued:
                status, body, headers = queued.pop(0)
                self.calls.append(Call(route, params, time.monotonic(), status, int(body["code"])))
                return status, body, headers
            self.calls.append(Call(route, params, time.monotonic()))
            return None

    def new_message(self, chat_id: str, body: dict[str, Any], *, parent: Message | None = None) -> Message:
        msg_type = str(body.get("msg_type"))
        content = json.loads(body.get("content") or "{}")
        message = Message(
            chat_id,
            f"om_{next(self._ids):08d}",
            msg_type,
            content,
            parent_id=parent.message_id if parent else "",
            in_thread=bool(body.get("reply_in_thread")),
        )
        key = content.get("file_key") or content.get("image_key")
        if key in self.uploads:
            message.file_name, message.file_bytes = self.uploads[key]
        self.sent.append(message)
        return message

    def message_data(self, message: Message) -> dict[str, Any]:
        return {
            "message_id": message.message_id,
            "root_id": message.parent_id,
            "parent_id": message.parent_id,
            "msg_type": message.msg_type,
            "create_time": str(int(time.time() * 1000)),
            "update_time": str(int(time.time() * 1000)),
            "deleted": False,
            "updated": False,
            "chat_id": message.chat_id,
            "sender": {"id": self.app_id, "id_type": "app_id", "sender_type": "app", "tenant_key": "tenant-1"},
            "body": {"content": json.dumps(message.content, ensure_ascii=False)},
        }


class LarkHandler(PlatformHandler):
    fake: FakeLark

    def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        given = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        return given in self.fake.tokens

    def _refuse_token(self) -> None:
        self._answer(
            400,
            {
                "code": 99991663,
                "msg": "Invalid access token for authorization. Please make a request with token attached.",
            },
        )

    def _route(self, method: str) -> tuple[str, list[str]]:
        parts = self.path_only.removeprefix("/open-apis/").split("/")
        if parts[:3] == ["im", "v1", "messages"]:
            if len(parts) == 3:
                return "message.create", []
            if len(parts) == 4:
                return ("message.patch" if method == "PATCH" else "message.get"), [parts[3]]
            if parts[4] == "reply":
                return "message.reply", [parts[3]]
            if parts[4] == "reactions":
                return "message_reaction.create", [parts[3]]
            if parts[4] == "resources" and len(parts) == 6:
                return "message_resource.get", [parts[3], parts[5]]
        if parts[:3] == ["im", "v1", "images"]:
            return "image.create", []
        if parts[:3] == ["im", "v1", "files"]:
            return "file.create", []
        if parts == ["bot", "v3", "info"]:
            return "bot.info", []
        return "unknown", []

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        self._handle("GET", b"")

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        self._handle("POST", self.read_body())

    def do_PATCH(self) -> None:  # noqa: N802 (http.server names it)
        self._handle("PATCH", self.read_body())

    def _handle(self, method: str, raw: bytes) -> None:
        fake = self.fake
        if self.path_only == "/open-apis/auth/v3/tenant_access_token/internal":
            body = json.loads(raw or b"{}")
            fake.record("tenant_access_token", body)
            if (body.get("app_id"), body.get("app_secret")) != (fake.app_id, fake.app_secret):
                self._answer(400, {"code": 10014, "msg": "app secret invalid"})
                return
            token = f"t-{next(fake._ids):08d}"
            fake.tokens.append(token)
            self._answer(200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200})
            return
        route, args = self._route(method)
        if route == "unknown":
            self._answer(404, {"code": 404, "msg": "404 page not found"})
            return
        if not self._authorized():
            self._refuse_token()
            return
        content_type = self.headers.get("content-type") or ""
        params: dict[str, Any] = dict(self.query_params())
        uploaded: tuple[str, bytes] | None = None
        if content_type.startswith("multipart/form-data"):
            for name, part in self.form_parts(raw).items():
                payload = part.get_payload(decode=True)
                data = payload if isinstance(payload, bytes) else b""
                if part.get_filename():
                    uploaded = (part.get_filename() or "", data)
                else:
                    params[name] = data.decode()
        elif raw:
            params.update(json.loads(raw))
        failure = fake.record(route, params)
        if failure is not None:
            self._answer(*failure)
            return
        with fake.lock:
            self._serve(route, args, params, uploaded)

    def _serve(self, route: str, args: list[str], params: dict[str, Any], uploaded: tuple[str, bytes] | None) -> None:
        fake = self.fake
        if route == "message.create":
            if params.get("receive_id_type") != "chat_id" or not params.get("receive_id"):
                self._answer(400, {"code": 230001, "msg": "invalid receive_id"})
                return
            message = fake.new_message(str(params["receive_id"]), params)
            self._answer(200, {"code": 0, "msg": "success", "data": fake.message_data(message)})
        elif route in ("message.reply", "message.patch", "message_reaction.create"):
            known = next((m for m in fake.sent if m.message_id == args[0]), None)
            if route == "message.reply":
                # Replies go to users' messages too; their chat is known from the push the test made.
                chat = known.chat_id if known else fake.user_messages.get(args[0], "")
                if not chat:
                    self._answer(400, {"code": 230011, "msg": "The message was withdrawn."})
                    return
                message = fake.new_message(chat, params, parent=known or Message(chat, args[0], "text", {}))
                self._answer(200, {"code": 0, "msg": "success", "data": fake.message_data(message)})
            elif route == "message.patch":
                if known is None or known.msg_type != "interactive":
                    self._answer(400, {"code": 230001, "msg": "This message is NOT a card."})
                    return
                known.content = json.loads(params.get("content") or "{}")
                self._answer(200, {"code": 0, "msg": "success", "data": {}})
            else:
                emoji = (params.get("reaction_type") or {}).get("emoji_type")
                self._answer(
                    200,
                    {
                        "code": 0,
                        "msg": "success",
                        "data": {"reaction_id": "r1", "reaction_type": {"emoji_type": emoji}},
                    },
                )
        elif route in ("image.create", "file.create"):
            if uploaded is None:
                self._answer(400, {"code": 234001, "msg": "Invalid request param."})
                return
            key = f"{'img_v3' if route == 'image.create' else 'file_v3'}_{next(fake._ids):08d}"
            fake.uploads[key] = (str(params.get("file_name") or uploaded[0]), uploaded[1])
            field = "image_key" if route == "image.create" else "file_key"
            self._answer(200, {"code": 0, "msg": "success", "data": {field: key}})
        elif route == "message_resource.get":
            found = fake.resources.get((args[0], args[1]))
            if found is None:
                self._answer(400, {"code": 234003, "msg": "File not in msg."})
                return
            name, mime_type, data = found
            self.send_response(200)
            self.send_header("Content-Type", mime_type)
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif route == "bot.info":
            self._answer(
                200,
                {"code": 0, "msg": "ok", "bot": {"activate_status": 2, "app_name": "LangBot", "open_id": BOT_OPEN_ID}},
            )
        else:
            self._answer(404, {"code": 404, "msg": "404 page not found"})
