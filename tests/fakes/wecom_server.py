"""A fake WeCom (企业微信) server API speaking its wire format: `GET /cgi-bin/gettoken?corpid=&corpsecret=`
sells access tokens (`{"errcode": 0, "access_token", "expires_in"}`); `POST /cgi-bin/message/send`,
`GET /cgi-bin/media/get` and `POST /cgi-bin/media/upload` take `?access_token=` and answer WeCom's JSON
(`{"errcode", "errmsg", ...}`, always HTTP 200; 42001 for an expired token), media/get the file itself
with its `Content-Disposition`.

It records what each user was sent (`sent`) and every call (`calls`), expires tokens on demand, and builds
callbacks as WeCom sends them to an internal app: the message XML encrypted with the app's
EncodingAESKey (AES-256-CBC, IV the key's first 16 bytes, 16 random bytes + 4-byte length + message +
corp id, PKCS#7 to 32 bytes), wrapped in `<xml><Encrypt>`, signed with SHA-1 of the sorted token,
timestamp, nonce and ciphertext in the query (`msg_signature`); and the URL check's `echostr` the same way.
The encryption is written here from the platform's description, not taken from the adapter.

WeChat Customer Service (微信客服) rides on the same server: `kf_event` builds the sealed `kf_msg_or_event`
callback with a fresh sync token, `POST /cgi-bin/kf/sync_msg` pages through the customer messages a test
queued (`kf_message`, `kf_enter_session`) from the given `cursor` (opaque, as WeCom's), and `POST
/cgi-bin/kf/send_msg` / `send_msg_on_event` record what customers were sent (`kf_sent`), refusing a welcome
code used twice.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode
from xml.sax.saxutils import escape

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

CORP_ID = "ww0123456789abcdef"
CORP_SECRET = "fake-corp-secret-0123456789abcdefghijklmn"
AGENT_ID = 1000002
TOKEN = "callbackToken123"
# 43 characters: Base64 of 32 bytes without its "=".
ENCODING_AES_KEY = base64.b64encode(bytes(range(1, 33))).decode().rstrip("=")


def seal(plain: bytes, *, key: str = ENCODING_AES_KEY, receive_id: str = CORP_ID) -> str:
    aes_key = base64.b64decode(key + "=")
    body = os.urandom(16) + struct.pack(">I", len(plain)) + plain + receive_id.encode()
    pad = 32 - len(body) % 32
    body += bytes([pad]) * pad
    encryptor = Cipher(algorithms.AES(aes_key), modes.CBC(aes_key[:16])).encryptor()
    return base64.b64encode(encryptor.update(body) + encryptor.finalize()).decode()


def msg_signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


def signed_query(
    encrypted: str, *, token: str = TOKEN, timestamp: int | None = None, nonce: str = "1372623149"
) -> dict[str, str]:
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    return {"msg_signature": msg_signature(token, stamp, nonce, encrypted), "timestamp": stamp, "nonce": nonce}


@dataclass
class Call:
    route: str
    query: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    at: float = 0.0
    errcode: int = 0


@dataclass
class Sent:
    touser: str
    msgtype: str
    content: dict[str, Any]
    agentid: int

    @property
    def text(self) -> str:
        return str(self.content.get("content") or "")


class FakeWeCom(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(WeComHandler)
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.sent: list[Sent] = []
        self.tokens: set[str] = set()
        self.media: dict[str, tuple[str, str, bytes]] = {}  # media id -> (name, type, bytes)
        self.kf_log: list[dict[str, Any]] = []  # every message and event of the kf accounts, in order
        self.kf_tokens: set[str] = set()
        self.kf_sent: list[dict[str, Any]] = []
        self.welcome_codes: set[str] = set()
        self.kf_page_size = 1000
        self._ids = itertools.count(1)

    # -- what a test sets up ---------------------------------------------------------------------
    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()

    def add_media(self, media_id: str, name: str, content_type: str, data: bytes) -> None:
        self.media[media_id] = (name, content_type, data)

    def message_xml(
        self,
        text: str | None = "hello",
        *,
        user: str = "ada",
        msg_id: str | None = None,
        msg_type: str = "text",
        extra: dict[str, str] | None = None,
    ) -> str:
        """A message to the app as WeCom builds it, before encryption."""
        fields = {
            "ToUserName": CORP_ID,
            "FromUserName": user,
            "CreateTime": str(int(time.time())),
            "MsgType": msg_type,
            **({"Content": text} if msg_type == "text" and text is not None else {}),
            **(extra or {}),
            "MsgId": msg_id or str(7_000_000_000_000_000_000 + next(self._ids)),
            "AgentID": str(AGENT_ID),
        }
        inner = "".join(
            f"<{k}>{v}</{k}>" if k in ("CreateTime", "MsgId", "AgentID") else f"<{k}><![CDATA[{v}]]></{k}>"
            for k, v in fields.items()
        )
        return f"<xml>{inner}</xml>"

    @staticmethod
    def callback(plain_xml: str, **sign: Any) -> tuple[bytes, str]:
        """The body and query string WeCom posts for a message: `<xml>` with `Encrypt`, signed in the query."""
        receive_id = sign.pop("receive_id", CORP_ID)
        encrypted = seal(plain_xml.encode(), receive_id=receive_id)
        body = (
            f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><AgentID><![CDATA[{AGENT_ID}]]></AgentID>"
            f"<Encrypt><![CDATA[{escape(encrypted)}]]></Encrypt></xml>"
        ).encode()
        return body, urlencode(signed_query(encrypted, **sign))

    @staticmethod
    def url_check(echo: str, **sign: Any) -> str:
        """The query string of WeCom's URL check (GET) with `echostr`."""
        encrypted = seal(echo.encode())
        return urlencode({**signed_query(encrypted, **sign), "echostr": encrypted})

    def kf_message(
        self, text: str = "hello", *, customer: str = "wmCustomerA", account: str = "wkAccount1", origin: int = 3
    ) -> dict[str, Any]:
        """Queue a message a customer (origin 3) or a human agent (5) wrote to a kf account."""
        number = next(self._ids)
        item = {
            "msgid": f"kfmsg{number:08d}",
            "open_kfid": account,
            "external_userid": customer,
            "send_time": int(time.time()),
            "origin": origin,
            "msgtype": "text",
            "text": {"content": text},
        }
        with self.lock:
            self.kf_log.append(item)
        return item

    def kf_enter_session(self, *, customer: str = "wmCustomerA", account: str = "wkAccount1") -> str:
        code = f"welcome-{next(self._ids):06d}"
        with self.lock:
            self.welcome_codes.add(code)
            self.kf_log.append(
                {
                    "msgid": f"kfevt{next(self._ids):08d}",
                    "send_time": int(time.time()),
                    "origin": 4,
                    "msgtype": "event",
                    "event": {
                        "event_type": "enter_session",
                        "open_kfid": account,
                        "external_userid": customer,
                        "scene": "qrcode",
                        "welcome_code": code,
                    },
                }
            )
        return code

    def kf_event(self, *, account: str = "wkAccount1", **sign: Any) -> tuple[bytes, str]:
        """The sealed `kf_msg_or_event` callback saying new messages wait, with a fresh sync token."""
        token = f"ENC{next(self._ids):010d}"
        with self.lock:
            self.kf_tokens.add(token)
        plain = (
            f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><CreateTime>{int(time.time())}</CreateTime>"
            "<MsgType><![CDATA[event]]></MsgType><Event><![CDATA[kf_msg_or_event]]></Event>"
            f"<Token><![CDATA[{token}]]></Token><OpenKfId><![CDATA[{account}]]></OpenKfId></xml>"
        )
        return self.callback(plain, **sign)

    # -- what a test reads -----------------------------------------------------------------------
    def calls_of(self, *routes: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.route in routes]

    def texts(self, user: str) -> list[str]:
        with self.lock:
            return [s.text for s in self.sent if s.touser == user and s.msgtype == "text"]


ROUTES = {
    "/cgi-bin/message/send": "message.send",
    "/cgi-bin/media/get": "media.get",
    "/cgi-bin/media/upload": "media.upload",
    "/cgi-bin/kf/sync_msg": "kf.sync_msg",
    "/cgi-bin/kf/send_msg": "kf.send_msg",
    "/cgi-bin/kf/send_msg_on_event": "kf.send_msg_on_event",
}


class WeComHandler(PlatformHandler):
    fake: FakeWeCom

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        self._handle(b"")

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        self._handle(self.read_body())

    def _answer(self, body: dict[str, Any]) -> None:
        # WeCom answers its errors with HTTP 200 too.
        self.send_json(200, body)

    def _handle(self, raw: bytes) -> None:
        fake = self.fake
        query = self.query_params()
        if self.path_only == "/cgi-bin/gettoken":
            with fake.lock:
                right = (query.get("corpid"), query.get("corpsecret")) == (CORP_ID, CORP_SECRET)
                fake.calls.append(Call("gettoken", query, at=time.monotonic(), errcode=0 if right else 40001))
                if not right:
                    self._answer({"errcode": 40001, "errmsg": "invalid secret"})
                    return
                token = f"tok-{next(fake._ids):08d}"
                fake.tokens.add(token)
            self._answer({"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": 7200})
            return
        route = ROUTES.get(self.path_only)
        if route is None:
            self.send_json(404, {"errcode": 404, "errmsg": "not found"})
            return
        body: dict[str, Any] = {}
        if route == "message.send" or route.startswith("kf."):
            body = json.loads(raw or b"{}")
        with fake.lock:
            given = query.get("access_token")
            errcode = 0 if given in fake.tokens else (42001 if given else 41001)
            fake.calls.append(Call(route, query, body, at=time.monotonic(), errcode=errcode))
        if errcode:
            self._answer(
                {"errcode": errcode, "errmsg": "access_token expired" if errcode == 42001 else "access_token missing"}
            )
            return
        if route == "message.send":
            self._send(body)
        elif route == "kf.sync_msg":
            self._kf_sync(body)
        elif route.startswith("kf.send_msg"):
            self._kf_send(route, body)
        elif route == "media.get":
            found = fake.media.get(query.get("media_id", ""))
            if found is None:
                self._answer({"errcode": 40007, "errmsg": "invalid media_id"})
                return
            name, content_type, data = found
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            part = self.form_parts(raw).get("media")
            if part is None or not part.get_filename():
                self._answer({"errcode": 40004, "errmsg": "invalid media type"})
                return
            payload = part.get_payload(decode=True)
            media_id = f"3a{next(fake._ids):08d}"
            with fake.lock:
                fake.media[media_id] = (
                    part.get_filename() or "",
                    part.get_content_type(),
                    payload if isinstance(payload, bytes) else b"",
                )
            self._answer(
                {
                    "errcode": 0,
                    "errmsg": "ok",
                    "type": query.get("type"),
                    "media_id": media_id,
                    "created_at": str(int(time.time())),
                }
            )

    def _send(self, body: dict[str, Any]) -> None:
        fake = self.fake
        kind = str(body.get("msgtype") or "")
        content = body.get(kind)
        if body.get("agentid") != AGENT_ID:
            self._answer({"errcode": 40056, "errmsg": "invalid agentid"})
            return
        if not isinstance(content, dict) or not body.get("touser"):
            self._answer({"errcode": 40008, "errmsg": "invalid message type"})
            return
        if kind == "text" and len(str(content.get("content") or "").encode()) > 2048:
            self._answer({"errcode": 45002, "errmsg": "content size out of limit"})
            return
        if kind in ("image", "file") and content.get("media_id") not in fake.media:
            self._answer({"errcode": 40007, "errmsg": "invalid media_id"})
            return
        with fake.lock:
            fake.sent.append(Sent(str(body["touser"]), kind, content, int(body["agentid"])))
        self._answer({"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": f"msgid-{next(fake._ids)}"})

    def _kf_sync(self, body: dict[str, Any]) -> None:
        fake = self.fake
        with fake.lock:
            if body.get("token") not in fake.kf_tokens:
                self._answer({"errcode": 95007, "errmsg": "invalid msg token"})
                return
            cursor = str(body.get("cursor") or "")
            start = int(cursor.removeprefix("cur")) if cursor.startswith("cur") else 0
            account = body.get("open_kfid")
            log = fake.kf_log[start:]
            page = log[: min(int(body.get("limit") or 1000), fake.kf_page_size)]
            end = start + len(page)
            listed = [m for m in page if not account or _kf_account(m) == account]
        self._answer(
            {
                "errcode": 0,
                "errmsg": "ok",
                "next_cursor": f"cur{end}",
                "has_more": 1 if end < start + len(log) else 0,
                "msg_list": listed,
            }
        )

    def _kf_send(self, route: str, body: dict[str, Any]) -> None:
        fake = self.fake
        kind = str(body.get("msgtype") or "")
        with fake.lock:
            if route == "kf.send_msg_on_event":
                code = str(body.get("code") or "")
                if code not in fake.welcome_codes:
                    self._answer({"errcode": 95012, "errmsg": "invalid welcome code"})
                    return
                fake.welcome_codes.discard(code)
            elif not body.get("touser") or not body.get("open_kfid"):
                self._answer({"errcode": 40003, "errmsg": "invalid touser or open_kfid"})
                return
            if not isinstance(body.get(kind), dict):
                self._answer({"errcode": 40008, "errmsg": "invalid message type"})
                return
            fake.kf_sent.append({"route": route, **body})
        self._answer({"errcode": 0, "errmsg": "ok", "msgid": f"kfsent-{next(fake._ids)}"})


def _kf_account(item: dict[str, Any]) -> str:
    event = item.get("event")
    return str(item.get("open_kfid") or (event.get("open_kfid") if isinstance(event, dict) else "") or "")
