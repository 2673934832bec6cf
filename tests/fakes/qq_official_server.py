"""A fake QQ Open Platform (bot API v2) speaking its wire format:

* `POST /app/getAppAccessToken` with `{"appId", "clientSecret"}` answers `{"access_token", "expires_in"}`
  (`expires_in` a string of seconds, as QQ sends it); a wrong pair answers 401 `{"code": 100016}`.
* `POST /v2/groups/{group_openid}/messages` and `POST /v2/users/{openid}/messages` with `{"content",
  "msg_type": 0, "msg_id"?, "msg_seq"?}` and `Authorization: QQBot <token>` + `X-Union-Appid` answer
  `{"id", "timestamp"}`. A token the fake did not issue (or revoked with `revoke_tokens`) answers 401
  `{"code": 11244}`; a `msg_id` the fake did not push answers 400; a `(msg_id, msg_seq)` used before
  answers 400 `{"code": 40054005, "message": "消息被去重"}` as QQ does; more than five replies to one message
  answer 400 `{"code": 40054010}`. A text over 2,000 characters answers 400.
* `GET /attachments/<name>`: files the test added (`add_attachment`), as QQ's multimedia host serves them.

It builds callbacks as QQ posts them (`dispatch`: `{"op": 0, "id", "d", "s", "t"}`; `validation`: op 13
with `plain_token` and `event_ts`), signed in `X-Signature-Ed25519` (hex Ed25519 signature of
`X-Signature-Timestamp` + the body, by the key whose seed is the bot secret repeated to 32 bytes), and
records what each chat was sent (`sent`: chat, text, passive or active).
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

APP_ID = "102000111"
APP_SECRET = "fakeQQbotSecret0123"  # shorter than 32: the seed repeats it


def key_of(secret: str = APP_SECRET) -> Ed25519PrivateKey:
    seed = secret.encode()
    while len(seed) < 32:
        seed = seed + seed
    return Ed25519PrivateKey.from_private_bytes(seed[:32])


def signed_headers(body: bytes, *, secret: str = APP_SECRET, timestamp: str | None = None) -> dict[str, str]:
    stamp = timestamp or str(int(time.time()))
    signature = key_of(secret).sign(stamp.encode() + body).hex()
    return {
        "X-Signature-Ed25519": signature,
        "X-Signature-Timestamp": stamp,
        "X-Signature-Method": "Ed25519",
        "X-Bot-Appid": APP_ID,
        "User-Agent": "QQBot-Callback",
    }


@dataclass
class Sent:
    chat: str
    text: str
    passive: bool
    msg_seq: int | None


class FakeQQOfficial(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(QQHandler)
        self.lock = threading.Lock()
        self.sent: list[Sent] = []
        self.calls: list[tuple[str, int]] = []  # (route, status)
        self.tokens: set[str] = set()
        self.token_requests = 0
        self.pushed: set[str] = set()  # message ids the fake pushed: the ones a passive reply may name
        self.seqs: dict[str, set[int]] = {}
        self.attachments: dict[str, tuple[str, bytes]] = {}
        self._ids = itertools.count(1)

    def revoke_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()

    def add_attachment(self, name: str, content_type: str, data: bytes) -> str:
        self.attachments[name] = (content_type, data)
        return f"{self.origin}/attachments/{name}"

    def dispatch(self, event_type: str, data: dict[str, Any]) -> bytes:
        n = next(self._ids)
        return json.dumps({"op": 0, "id": f"{event_type}:evt{n:06d}", "d": data, "s": n, "t": event_type}).encode()

    def _message(self, content: str, attachments: list[dict[str, Any]] | None, age_seconds: float) -> dict[str, Any]:
        n = next(self._ids)
        message_id = f"ROBOT1.0_fake{n:06d}{secrets.token_hex(4)}"
        with self.lock:
            self.pushed.add(message_id)
        stamp = datetime.fromtimestamp(time.time() - age_seconds, tz=UTC).isoformat()
        data: dict[str, Any] = {"id": message_id, "content": content, "timestamp": stamp}
        if attachments:
            data["attachments"] = attachments
        return data

    def group_at(
        self,
        content: str,
        *,
        group: str = "G0PENID",
        member: str = "M0PENID",
        attachments: list[dict[str, Any]] | None = None,
        age_seconds: float = 0.0,
    ) -> bytes:
        data = self._message(content, attachments, age_seconds)
        data.update(group_id=group, group_openid=group, author={"id": member, "member_openid": member})
        return self.dispatch("GROUP_AT_MESSAGE_CREATE", data)

    def c2c(
        self,
        content: str,
        *,
        user: str = "U0PENID",
        attachments: list[dict[str, Any]] | None = None,
        age_seconds: float = 0.0,
    ) -> bytes:
        data = self._message(content, attachments, age_seconds)
        data["author"] = {"id": user, "user_openid": user}
        return self.dispatch("C2C_MESSAGE_CREATE", data)

    @staticmethod
    def validation(plain_token: str = "Arq0D5A61EgUu4OxUvOp", event_ts: str = "1725442341") -> bytes:
        return json.dumps({"op": 13, "d": {"plain_token": plain_token, "event_ts": event_ts}}).encode()

    def texts(self, chat: str) -> list[tuple[bool, str]]:
        with self.lock:
            return [(s.passive, s.text) for s in self.sent if s.chat == chat]


MESSAGES = re.compile(r"^/v2/(groups|users)/([A-Za-z0-9_-]+)/messages$")


class QQHandler(PlatformHandler):
    fake: FakeQQOfficial

    def _answer(self, status: int, body: dict[str, Any], route: str) -> None:
        with self.fake.lock:
            self.fake.calls.append((route, status))
        self.send_json(status, body)

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        name = self.path_only.removeprefix("/attachments/")
        item = self.fake.attachments.get(name)
        if item is None:
            self._answer(404, {"message": "not found"}, "attachment")
            return
        with self.fake.lock:
            self.fake.calls.append(("attachment", 200))
        self.send_bytes(200, item[0], item[1])

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        body = json.loads(self.read_body() or b"{}")
        if self.path_only == "/app/getAppAccessToken":
            if body.get("appId") != APP_ID or body.get("clientSecret") != APP_SECRET:
                self._answer(401, {"code": 100016, "message": "invalid appid or secret"}, "token")
                return
            token = secrets.token_hex(12)
            with fake.lock:
                fake.tokens.add(token)
                fake.token_requests += 1
            self._answer(200, {"access_token": token, "expires_in": "7200"}, "token")
            return
        found = MESSAGES.match(self.path_only)
        if found is None:
            self._answer(404, {"code": 404, "message": "not found"}, "?")
            return
        auth = self.headers.get("authorization") or ""
        with fake.lock:
            known = auth.startswith("QQBot ") and auth.removeprefix("QQBot ") in fake.tokens
        if not known or self.headers.get("x-union-appid") != APP_ID:
            self._answer(401, {"code": 11244, "message": "token not exist or expire"}, "send")
            return
        text = str(body.get("content") or "")
        if body.get("msg_type") != 0 or not text or len(text) > 2000:
            self._answer(400, {"code": 40034006, "message": "content invalid"}, "send")
            return
        chat = f"{'group' if found.group(1) == 'groups' else 'user'}:{found.group(2)}"
        msg_id, seq = body.get("msg_id"), body.get("msg_seq")
        with fake.lock:
            if msg_id is not None:
                if msg_id not in fake.pushed:
                    problem: tuple[int, str] | None = (40034024, "msg_id invalid")
                else:
                    used = fake.seqs.setdefault(str(msg_id), set())
                    if seq in used:
                        problem = (40054005, "消息被去重，请检查请求msgseq")
                    elif len(used) >= 5:
                        problem = (40054010, "reply count exceeded")
                    else:
                        used.add(seq)
                        problem = None
            else:
                problem = None
            if problem is None:
                fake.sent.append(Sent(chat, text, msg_id is not None, seq))
        if problem is not None:
            self._answer(400, {"code": problem[0], "message": problem[1]}, "send")
            return
        self._answer(200, {"id": f"sent{next(fake._ids)}", "timestamp": datetime.now(tz=UTC).isoformat()}, "send")
