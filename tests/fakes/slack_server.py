"""A fake Slack Web API speaking its wire format: `POST /api/<method>` with a form-encoded or JSON body and
`Authorization: Bearer <bot token>`, answered HTTP 200 `{"ok": true, ...}` or `{"ok": false, "error": ...}`
(a 429 carries `Retry-After`); the files upload v2 flow (`files.getUploadURLExternal` hands out an upload
URL on this server, the bytes are POSTed there, `files.completeUploadExternal` shares them); private files
served at `GET /files-pri/...` only with the bot token.

It keeps the channels as Slack would (`sent`: each bot message's current text), records every call with its
time (`calls`), can answer the next call of a method with a 429 (`rate_limit_next`) or carry it out and
hang up without answering (`hang_up_after_next`), and builds
real-shaped Events API payloads and their signature headers for tests to post to the host's webhook.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

BOT_TOKEN = "xoxb-1111-2222-fake"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_USER_ID = "U0BOTUSER"
TEAM_ID = "T0TEAM"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float
    status: int = 200
    error: str | None = None


@dataclass
class Message:
    channel: str
    ts: str
    text: str = ""
    thread_ts: str | None = None
    file_name: str = ""
    file_bytes: bytes = b""
    kind: str = "text"


@dataclass
class PendingUpload:
    file_id: str
    filename: str
    length: int
    data: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def sign(body: bytes, *, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack signs an Events API request with (v0 HMAC-SHA256 of `v0:<timestamp>:<body>`)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


class FakeSlack(FakePlatformServer):
    def __init__(self, token: str = BOT_TOKEN) -> None:
        super().__init__(SlackHandler)
        self.token = token
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.sent: list[Message] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # path under /files-pri/ -> (mime type, bytes)
        self.uploads: dict[str, PendingUpload] = {}
        self.failures: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)

    # -- what a test sets up ---------------------------------------------------------------------
    def rate_limit_next(self, method: str, retry_after: int) -> None:
        self.failures.setdefault(method, []).append(
            (429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)})
        )

    def add_file(self, name: str, data: bytes, mime_type: str) -> dict[str, Any]:
        """A file a user shared, as it appears in a message event's `files`."""
        file_id = f"F{next(self._ids):08d}"
        path = f"{TEAM_ID}-{file_id}/{name}"
        self.files[path] = (mime_type, data)
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mime_type,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(data),
            "user": "U0ADA",
            "url_private": f"{self.origin}/files-pri/{path}",
            "url_private_download": f"{self.origin}/files-pri/{path}?download=1",
        }

    def event_payload(
        self,
        text: str | None = "hello",
        *,
        event_type: str = "message",
        channel: str = "D0DIRECT",
        channel_type: str = "im",
        user: str = "U0ADA",
        event_id: str | None = None,
        thread_ts: str | None = None,
        files: list[dict[str, Any]] | None = None,
        bot_id: str | None = None,
        subtype: str | None = None,
    ) -> dict[str, Any]:
        """An `event_callback` as the Events API posts it."""
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        event: dict[str, Any] = {
            "type": event_type,
            "user": user,
            "ts": ts,
            "client_msg_id": f"m-{ts}",
            "team": TEAM_ID,
            "channel": channel,
            "event_ts": ts,
            "channel_type": channel_type,
        }
        if event_type == "app_mention":
            event.pop("channel_type")
        if text is not None:
            event["text"] = text
        if thread_ts:
            event["thread_ts"] = thread_ts
        if files:
            event["files"] = files
            event["subtype"] = "file_share"
            event["upload"] = False
        if bot_id:
            event["bot_id"] = bot_id
        if subtype:
            event["subtype"] = subtype
        return {
            "token": "deprecated-verification-token",
            "team_id": TEAM_ID,
            "api_app_id": "A0APP",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }

    # -- what a test reads -----------------------------------------------------------------------
    def texts(self, channel: str) -> list[str]:
        with self.lock:
            return [m.text for m in self.sent if m.channel == channel and m.kind == "text"]

    def calls_of(self, *methods: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method in methods]

    # -- the API ---------------------------------------------------------------------------------
    def answer(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            queued = self.failures.get(method)
            if queued:
                status, body, headers = queued.pop(0)
                self.calls.append(Call(method, params, time.monotonic(), status, body.get("error")))
                return status, body, headers
            body = self._result(method, params)
            self.calls.append(
                Call(method, params, time.monotonic(), 200, None if body.get("ok") else body.get("error"))
            )
            return 200, body, {}

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "chat.postMessage":
            text = params.get("text")
            if not params.get("channel") or not text:
                return {"ok": False, "error": "no_text" if params.get("channel") else "channel_not_found"}
            message = Message(str(params["channel"]), self._next_ts(), str(text), params.get("thread_ts"))
            self.sent.append(message)
            return {
                "ok": True,
                "channel": message.channel,
                "ts": message.ts,
                "message": {
                    "type": "message",
                    "user": BOT_USER_ID,
                    "bot_id": "B0BOT",
                    "text": message.text,
                    "ts": message.ts,
                },
            }
        if method == "chat.update":
            for message in self.sent:
                if message.channel == params.get("channel") and message.ts == params.get("ts"):
                    message.text = str(params.get("text") or "")
                    return {"ok": True, "channel": message.channel, "ts": message.ts, "text": message.text}
            return {"ok": False, "error": "message_not_found"}
        if method == "auth.test":
            return {"ok": True, "url": "https://acme.slack.com/", "team": "Acme", "user": "langbot",
                    "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": "B0BOT"}  # fmt: skip
        if method == "reactions.add":
            return {"ok": True}
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._ids):08d}"
            self.uploads[file_id] = PendingUpload(file_id, str(params.get("filename")), int(params.get("length") or 0))
            return {"ok": True, "upload_url": f"{self.origin}/upload/v1/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":
            shared = []
            for item in json.loads(params.get("files") or "[]"):
                upload = self.uploads.get(item.get("id"))
                if upload is None or upload.data is None:
                    return {"ok": False, "error": "file_not_found"}
                ts = self._next_ts()
                channel = str(params.get("channel_id") or "")
                self.sent.append(
                    Message(channel, ts, str(params.get("initial_comment") or ""), params.get("thread_ts"),
                            upload.filename, upload.data, kind="file")
                )  # fmt: skip
                shared.append({"id": upload.file_id, "name": upload.filename, "title": item.get("title")})
            return {"ok": True, "files": shared}
        return {"ok": False, "error": "unknown_method"}


class SlackHandler(PlatformHandler):
    fake: FakeSlack

    def _authorized(self) -> bool:
        return self.headers.get("authorization") == f"Bearer {self.fake.token}"

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        path = self.path_only
        if not path.startswith("/files-pri/"):
            self.send_json(404, {"ok": False, "error": "not_found"})
            return
        if not self._authorized():
            # Slack answers an unauthenticated file request with its sign-in page.
            self.send_bytes(200, "text/html; charset=utf-8", b"<html>sign in</html>")
            return
        found = self.fake.files.get(path[len("/files-pri/") :])
        if found is None:
            self.send_json(404, {"ok": False, "error": "file_not_found"})
            return
        self.send_bytes(200, found[0], found[1])

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        raw = self.read_body()
        path = self.path_only
        if path.startswith("/upload/v1/"):
            upload = self.fake.uploads.get(path.rsplit("/", 1)[-1])
            if upload is None:
                self.send_bytes(404, "text/plain", b"not found")
                return
            upload.data = raw
            self.send_bytes(200, "text/plain", f"OK - {len(raw)}".encode())
            return
        if not path.startswith("/api/"):
            self.send_json(404, {"ok": False, "error": "unknown_method"})
            return
        method = path[len("/api/") :]
        if not self._authorized():
            self.send_json(200, {"ok": False, "error": "not_authed"})
            return
        # Slack takes arguments in the query string, a form or a JSON body (the SDK uses all three).
        params: dict[str, Any] = self.query_params()
        content_type = self.headers.get("content-type") or ""
        if content_type.startswith("application/json"):
            params.update(json.loads(raw or b"{}"))
        else:
            params.update({k: v[0] for k, v in parse_qs(raw.decode()).items()})
        status, body, headers = self.fake.answer(method, params)
        if self.fake.take_hang_up(method):
            self.hang_up()
            return
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
