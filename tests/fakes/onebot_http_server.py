"""A fake OneBot v11 implementation's HTTP API (NapCat's or go-cqhttp's "HTTP server"), speaking its wire
format: `POST /<action>` with the action's params as a JSON body, `Authorization: Bearer <access token>`
(none answers 401, a wrong one 403, as OneBot v11 says); an action it does not know answers 404. `send_msg`
(`{"message_type", "user_id"|"group_id", "message": [segments]}`) answers `{"status": "ok", "retcode": 0,
"data": {"message_id"}}`; a message that is not a list of segments answers retcode 100 (bad params).

It builds events as OneBot's HTTP POST reporting sends them (`event`, a message event in the array message
format) and their `X-Signature` (`sign`: `sha1=` + hex HMAC-SHA1 of the body with the secret), and records
what each chat was sent (`sent`).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

ACCESS_TOKEN = "onebot-http-access-token-1"
SECRET = "onebot-http-post-secret-1"
SELF_ID = 10001
USER_ID = 20002
GROUP_ID = 30003


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()


class FakeOneBotHTTP(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(OneBotHTTPHandler)
        self.lock = threading.Lock()
        self.sent: list[tuple[str, list[dict[str, Any]]]] = []  # (chat, segments)
        self.calls: list[tuple[str, int]] = []
        self._ids = itertools.count(5000)

    def event(self, *segments: dict[str, Any], group: bool = False, user_id: int = USER_ID) -> bytes:
        event: dict[str, Any] = {
            "time": int(time.time()),
            "self_id": SELF_ID,
            "post_type": "message",
            "message_type": "group" if group else "private",
            "sub_type": "normal" if group else "friend",
            "message_id": next(self._ids),
            "user_id": user_id,
            "message": list(segments),
            "raw_message": "".join(str(s["data"].get("text") or "") for s in segments),
            "font": 0,
            "sender": {"user_id": user_id, "nickname": "Ada"},
        }
        if group:
            event["group_id"] = GROUP_ID
        return json.dumps(event).encode()

    def texts(self, chat: str) -> list[str]:
        with self.lock:
            return [
                "".join(str(s["data"].get("text") or "") for s in segments if s.get("type") == "text")
                for c, segments in self.sent
                if c == chat
            ]

    def segments(self, chat: str) -> list[list[dict[str, Any]]]:
        with self.lock:
            return [segments for c, segments in self.sent if c == chat]


class OneBotHTTPHandler(PlatformHandler):
    fake: FakeOneBotHTTP

    def _answer(self, status: int, body: Any, action: str) -> None:
        with self.fake.lock:
            self.fake.calls.append((action, status))
        if body is None:
            self.send_bytes(status, "text/plain", b"")
        else:
            self.send_json(status, body)

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        raw = self.read_body()
        action = self.path_only.strip("/")
        auth = self.headers.get("authorization")
        if not auth:
            self._answer(401, None, action)
            return
        if auth != f"Bearer {ACCESS_TOKEN}":
            self._answer(403, None, action)
            return
        if action != "send_msg":
            self._answer(404, None, action)
            return
        params = json.loads(raw or b"{}")
        message = params.get("message")
        kind = params.get("message_type")
        peer = params.get("group_id" if kind == "group" else "user_id")
        if not isinstance(message, list) or kind not in ("group", "private") or not isinstance(peer, int):
            self._answer(200, {"status": "failed", "retcode": 100, "data": None, "message": "bad params"}, action)
            return
        with self.fake.lock:
            self.fake.sent.append((f"{kind}:{peer}", message))
        message_id = next(self.fake._ids)
        self._answer(200, {"status": "ok", "retcode": 0, "data": {"message_id": message_id}}, action)
