"""A fake LINE Messaging API speaking its wire format: `POST /v2/bot/message/reply` (`{"replyToken",
"messages"}`; a token is good once and only for tokens the fake issued, else 400 `Invalid reply token`),
`POST /v2/bot/message/push` (`{"to", "messages"}`; an `X-Line-Retry-Key` seen before answers 409, as LINE
does), both answering `{"sentMessages": [{"id", "quoteToken"}]}`, and `GET /v2/bot/message/{id}/content`
(the data API's path; the fake serves both hosts on one origin). Every call needs `Authorization: Bearer`
with the channel access token (401 otherwise); a text over 5,000 characters answers 400.

It builds webhook bodies as LINE posts them (`webhook`: `{"destination", "events"}`, signed in
`X-Line-Signature`: Base64 of HMAC-SHA256 of the body with the channel secret) and records what each chat
was sent and how (`sent`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

CHANNEL_SECRET = "fake-line-channel-secret-0123"
ACCESS_TOKEN = "fake-line-access-token-abcdef"
BOT_USER_ID = "U0000000000000000000000000000b0t"


def signature(body: bytes, secret: str = CHANNEL_SECRET) -> str:
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


@dataclass
class Sent:
    chat: str
    how: str  # "reply" or "push"
    text: str


class FakeLine(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(LineHandler)
        self.lock = threading.Lock()
        self.sent: list[Sent] = []
        self.calls: list[tuple[str, int]] = []  # (route, status)
        self.reply_tokens: dict[str, str] = {}  # issued and unused token -> chat
        self.retry_keys: set[str] = set()
        self.content: dict[str, tuple[str, bytes]] = {}
        self._ids = itertools.count(1)

    def add_content(self, message_id: str, content_type: str, data: bytes) -> None:
        self.content[message_id] = (content_type, data)

    def message_event(
        self,
        message: dict[str, Any],
        *,
        user: str = "Uada",
        group: str | None = None,
        age_seconds: float = 0.0,
        event_id: str | None = None,
    ) -> dict[str, Any]:
        n = next(self._ids)
        source: dict[str, Any] = (
            {"type": "group", "groupId": group, "userId": user} if group else {"type": "user", "userId": user}
        )
        token = secrets.token_hex(16)  # random as LINE's, and so never one a cache saw in an earlier run
        with self.lock:
            self.reply_tokens[token] = group or user
        return {
            "type": "message",
            "mode": "active",
            "timestamp": int((time.time() - age_seconds) * 1000),
            "source": source,
            "webhookEventId": event_id or f"01HEVENT{n:018d}",
            "deliveryContext": {"isRedelivery": False},
            "replyToken": token,
            "message": {"id": str(480_000_000_000_000 + n), "quoteToken": f"q{n}", **message},
        }

    @staticmethod
    def webhook(*events: dict[str, Any]) -> bytes:
        return json.dumps({"destination": BOT_USER_ID, "events": list(events)}).encode()

    def texts(self, chat: str) -> list[tuple[str, str]]:
        with self.lock:
            return [(s.how, s.text) for s in self.sent if s.chat == chat]


CONTENT = re.compile(r"^/v2/bot/message/([0-9A-Za-z]+)/content$")


class LineHandler(PlatformHandler):
    fake: FakeLine

    def _fail(self, status: int, message: str, route: str) -> None:
        with self.fake.lock:
            self.fake.calls.append((route, status))
        self.send_json(status, {"message": message})

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        found = CONTENT.match(self.path_only)
        if self.headers.get("authorization") != f"Bearer {ACCESS_TOKEN}":
            self._fail(401, "Authentication failed", "content")
            return
        item = self.fake.content.get(found.group(1)) if found else None
        if item is None:
            self._fail(404, "Not found", "content")
            return
        with self.fake.lock:
            self.fake.calls.append(("content", 200))
        self.send_bytes(200, item[0], item[1])

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        route = {"/v2/bot/message/reply": "reply", "/v2/bot/message/push": "push"}.get(self.path_only)
        if route is None:
            self._fail(404, "Not found", "?")
            return
        if self.headers.get("authorization") != f"Bearer {ACCESS_TOKEN}":
            self._fail(401, "Authentication failed", route)
            return
        body = json.loads(raw or b"{}")
        messages = body.get("messages") or []
        if not messages or any(len(str(m.get("text") or "").encode("utf-16-le")) // 2 > 5000 for m in messages):
            self._fail(400, "The request body has 1 error(s)", route)
            return
        with fake.lock:
            if route == "reply":
                chat = fake.reply_tokens.pop(str(body.get("replyToken")), None)
            else:
                key = self.headers.get("x-line-retry-key")
                if key in fake.retry_keys:
                    chat = None
                else:
                    fake.retry_keys.add(key or "")
                    chat = str(body.get("to") or "")
        if chat is None:
            self._fail(
                409 if route == "push" else 400, "Invalid reply token" if route == "reply" else "Conflict", route
            )
            return
        with fake.lock:
            fake.calls.append((route, 200))
            ids = []
            for message in messages:
                fake.sent.append(Sent(chat, route, str(message.get("text") or "")))
                ids.append({"id": str(next(fake._ids)), "quoteToken": "q"})
        self.send_json(200, {"sentMessages": ids})
