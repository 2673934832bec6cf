"""A fake Telegram Bot API server speaking its wire format: `POST /bot<token>/<method>` with form-encoded,
multipart or JSON parameters, answered `{"ok": true, "result": ...}` or `{"ok": false, "error_code",
"description", "parameters": {"retry_after"}}`; files served at `GET /file/bot<token>/<file_path>`.

It keeps the chat as Telegram would (`messages`: each bot message's current text by chat), records every
call with its time (`calls`), can answer the next call of a method with a 429 (`rate_limit_next`) or carry
it out and hang up without answering (`hang_up_after_next`), refuses an edit to the same text as Telegram
does ("message is not modified"), and builds real-shaped `Update` JSON for tests to post to the host's
webhook (`message_update`).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

BOT_USER_ID = 777000111
TOKEN = f"{BOT_USER_ID}:AAtest-token"
BOT_USERNAME = "langbot_test_bot"


# What the Bot API answers an edit to the text a message already has.
NOT_MODIFIED = {
    "ok": False,
    "error_code": 400,
    "description": "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message",
}


class NotModifiedError(Exception):
    pass


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float
    status: int = 200
    files: dict[str, tuple[str, str, bytes]] = field(default_factory=dict)


@dataclass
class SentMessage:
    chat_id: str
    message_id: int
    text: str = ""
    kind: str = "text"
    file_name: str = ""
    file_bytes: bytes = b""


class FakeTelegram(FakePlatformServer):
    def __init__(self, token: str = TOKEN) -> None:
        super().__init__(TelegramHandler)
        self.token = token
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.sent: list[SentMessage] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, bytes)
        self.failures: dict[str, deque[tuple[int, dict[str, Any]]]] = {}
        self.webhook: dict[str, Any] = {}
        self.traceparents: list[str] = []  # the `traceparent` header of each API call that carried one
        self._ids = itertools.count(100)
        self._updates = itertools.count(500_000)

    # -- what a test sets up ---------------------------------------------------------------------
    def add_file(self, file_id: str, data: bytes, file_path: str) -> None:
        self.files[file_id] = (file_path, data)

    def rate_limit_next(self, method: str, retry_after: int) -> None:
        body = {
            "ok": False,
            "error_code": 429,
            "description": f"Too Many Requests: retry after {retry_after}",
            "parameters": {"retry_after": retry_after},
        }
        self.failures.setdefault(method, deque()).append((429, body))

    def message_update(
        self,
        text: str | None = None,
        *,
        chat_id: int = 4242,
        chat_type: str = "private",
        user_id: int = 31337,
        update_id: int | None = None,
        entities: list[dict[str, Any]] | None = None,
        photo_file_id: str | None = None,
        document: dict[str, Any] | None = None,
        reply_to_bot: bool = False,
    ) -> dict[str, Any]:
        """An `Update` with a `message` as Telegram posts it to a webhook."""
        message: dict[str, Any] = {
            "message_id": next(self._ids),
            "from": {"id": user_id, "is_bot": False, "first_name": "Ada", "username": "ada", "language_code": "en"},
            "chat": (
                {"id": chat_id, "type": chat_type, "first_name": "Ada", "username": "ada"}
                if chat_type == "private"
                else {"id": chat_id, "type": chat_type, "title": "Test group"}
            ),
            "date": int(time.time()),
        }
        key = "caption" if photo_file_id or document else "text"
        if text is not None:
            message[key] = text
        if entities:
            message["caption_entities" if key == "caption" else "entities"] = entities
        if photo_file_id:
            message["photo"] = [
                {
                    "file_id": f"{photo_file_id}-small",
                    "file_unique_id": "s1",
                    "width": 90,
                    "height": 90,
                    "file_size": 10,
                },
                {"file_id": photo_file_id, "file_unique_id": "b1", "width": 800, "height": 800, "file_size": 2048},
            ]
        if document:
            message["document"] = document
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": 1,
                "from": {"id": BOT_USER_ID, "is_bot": True, "first_name": "Bot", "username": BOT_USERNAME},
                "chat": message["chat"],
                "date": int(time.time()) - 60,
                "text": "an earlier answer",
            }
        return {"update_id": update_id if update_id is not None else next(self._updates), "message": message}

    # -- what a test reads -----------------------------------------------------------------------
    def texts(self, chat_id: int | str) -> list[str]:
        """The current text of every text message the bot has in the chat, oldest first."""
        with self.lock:
            return [m.text for m in self.sent if m.chat_id == str(chat_id) and m.kind == "text"]

    def calls_of(self, *methods: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method in methods]

    # -- the API ---------------------------------------------------------------------------------
    def answer(self, method: str, params: dict[str, Any], files: dict[str, tuple[str, str, bytes]]) -> tuple[int, Any]:
        with self.lock:
            queued = self.failures.get(method)
            if queued:
                status, body = queued.popleft()
                self.calls.append(Call(method, params, time.monotonic(), status, files))
                return status, body
            try:
                result = self._result(method, params, files)
            except NotModifiedError:
                self.calls.append(Call(method, params, time.monotonic(), 400, files))
                return 400, NOT_MODIFIED
            self.calls.append(Call(method, params, time.monotonic(), 200, files))
            return 200, {"ok": True, "result": result}

    def _message(self, sent: SentMessage) -> dict[str, Any]:
        body: dict[str, Any] = {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": {"id": int(sent.chat_id), "type": "private"},
            "from": {"id": BOT_USER_ID, "is_bot": True, "first_name": "Bot", "username": BOT_USERNAME},
        }
        if sent.kind == "text":
            body["text"] = sent.text
        elif sent.kind == "photo":
            body["photo"] = [{"file_id": f"out-{sent.message_id}", "file_unique_id": "o", "width": 1, "height": 1}]
        else:
            body["document"] = {"file_id": f"out-{sent.message_id}", "file_unique_id": "o", "file_name": sent.file_name}
        return body

    def _result(self, method: str, params: dict[str, Any], files: dict[str, tuple[str, str, bytes]]) -> Any:
        if method == "getMe":
            return {"id": BOT_USER_ID, "is_bot": True, "first_name": "Bot", "username": BOT_USERNAME}
        if method in ("setWebhook", "setMessageReaction"):
            if method == "setWebhook":
                self.webhook = params
            return True
        if method == "sendMessage":
            sent = SentMessage(str(params["chat_id"]), next(self._ids), str(params["text"]))
            self.sent.append(sent)
            return self._message(sent)
        if method == "editMessageText":
            for sent in self.sent:
                if sent.chat_id == str(params["chat_id"]) and sent.message_id == int(params["message_id"]):
                    if sent.text == str(params["text"]):
                        raise NotModifiedError
                    sent.text = str(params["text"])
                    return self._message(sent)
            return {"message_id": int(params["message_id"])}
        if method in ("sendPhoto", "sendDocument"):
            field_name = "photo" if method == "sendPhoto" else "document"
            name, _, data = files.get(field_name, ("", "", b""))
            kind = "photo" if method == "sendPhoto" else "document"
            sent = SentMessage(str(params["chat_id"]), next(self._ids), kind=kind, file_name=name, file_bytes=data)
            self.sent.append(sent)
            return self._message(sent)
        if method == "getFile":
            file_id = str(params["file_id"])
            path, data = self.files[file_id]
            return {"file_id": file_id, "file_unique_id": "u", "file_size": len(data), "file_path": path}
        raise KeyError(method)


# Form-encoded parameters carry strings as they are and everything else as JSON (what the SDK sends).
JSON_PARAMS = frozenset({
    "chat_id", "message_id", "message_thread_id", "reply_parameters", "reaction", "allowed_updates",
    "drop_pending_updates", "disable_notification", "is_big", "max_connections",
})  # fmt: skip


def _param(name: str, value: str) -> Any:
    if name not in JSON_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


class TelegramHandler(PlatformHandler):
    fake: FakeTelegram

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        prefix = f"/file/bot{self.fake.token}/"
        path = unquote(self.path_only)  # the SDK quotes the token's colon; Telegram takes both
        if not path.startswith(prefix):
            self.send_json(404, {"ok": False, "error_code": 404, "description": "Not Found"})
            return
        wanted = path[len(prefix) :]
        for path, data in self.fake.files.values():
            if path == wanted:
                self.send_bytes(200, "application/octet-stream", data)
                return
        self.send_json(404, {"ok": False, "error_code": 404, "description": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        raw = self.read_body()
        if traceparent := self.headers.get("traceparent"):
            self.fake.traceparents.append(traceparent)
        head, _, method = unquote(self.path_only).rpartition("/")
        if head != f"/bot{self.fake.token}":
            self.send_json(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
            return
        content_type = self.headers.get("content-type") or ""
        params: dict[str, Any] = {}
        files: dict[str, tuple[str, str, bytes]] = {}
        if content_type.startswith("multipart/form-data"):
            for name, part in self.form_parts(raw).items():
                payload = part.get_payload(decode=True)
                data = payload if isinstance(payload, bytes) else b""
                if part.get_filename():
                    files[name] = (part.get_filename() or "", part.get_content_type(), data)
                else:
                    params[name] = _param(name, data.decode())
        elif content_type.startswith("application/json"):
            params = json.loads(raw or b"{}")
        else:
            params = {k: _param(k, v[0]) for k, v in parse_qs(raw.decode()).items()}
        # InputFile parts are referenced as attach://<name> in the field itself.
        for name, value in list(params.items()):
            if isinstance(value, str) and value.startswith("attach://") and value[9:] in files:
                files[name] = files.pop(value[9:])
        status, body = self.fake.answer(method, params, files)
        if self.fake.take_hang_up(method):
            self.hang_up()
            return
        self.send_json(status, body)
