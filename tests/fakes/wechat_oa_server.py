"""A fake WeChat Official Account server API speaking its wire format: `GET /cgi-bin/token?grant_type=
client_credential&appid=&secret=` sells access tokens (`{"access_token", "expires_in"}`); `POST
/cgi-bin/message/custom/send` (customer-service messages), `GET /cgi-bin/media/get` and `POST
/cgi-bin/media/upload` take `?access_token=` and answer WeChat's JSON (`{"errcode", "errmsg"}`, always HTTP
200; 42001 for an expired token, 40001 for one it does not know), media/get the file itself.

It records what each follower (openid) was sent (`sent`) and every call (`calls`), expires tokens on demand,
and builds pushes as WeChat posts them to the account's server: the message XML, signed in the query
(`signature`: SHA-1 of the sorted token, timestamp and nonce), in plaintext or in safe mode (the XML
sealed with the EncodingAESKey — AES-256-CBC, IV the key's first 16 bytes, 16 random bytes + 4-byte
length + message + AppID, PKCS#7 to 32 bytes — in `<Encrypt>`, with `encrypt_type=aes` and
`msg_signature` over the ciphertext too). `open_reply` reads a passive reply back the same way. The
encryption is written here from the platform's description, not taken from the adapter.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import secrets
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode
from xml.etree import ElementTree

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

APP_ID = "wx0123456789abcdef"
APP_SECRET = "fake-app-secret-0123456789abcdef"
TOKEN = "oaToken123"
ACCOUNT = "gh_0123456789ab"  # the account's original id, the pushes' ToUserName
ENCODING_AES_KEY = base64.b64encode(bytes(range(40, 72))).decode().rstrip("=")


def _aes_key(key: str) -> bytes:
    return base64.b64decode(key + "=")


def seal(plain: bytes, *, key: str = ENCODING_AES_KEY, app_id: str = APP_ID) -> str:
    aes_key = _aes_key(key)
    body = os.urandom(16) + struct.pack(">I", len(plain)) + plain + app_id.encode()
    pad = 32 - len(body) % 32
    body += bytes([pad]) * pad
    encryptor = Cipher(algorithms.AES(aes_key), modes.CBC(aes_key[:16])).encryptor()
    return base64.b64encode(encryptor.update(body) + encryptor.finalize()).decode()


def unseal(encrypted: str, *, key: str = ENCODING_AES_KEY) -> tuple[bytes, bytes]:
    """(message, app id) of a sealed text."""
    aes_key = _aes_key(key)
    decryptor = Cipher(algorithms.AES(aes_key), modes.CBC(aes_key[:16])).decryptor()
    plain = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
    plain = plain[: -plain[-1]]
    (length,) = struct.unpack(">I", plain[16:20])
    return plain[20 : 20 + length], plain[20 + length :]


def sha1_of(*parts: str) -> str:
    return hashlib.sha1("".join(sorted(parts)).encode()).hexdigest()


def signed_query(*, token: str = TOKEN, timestamp: int | None = None, nonce: str | None = None) -> dict[str, str]:
    nonce = nonce if nonce is not None else str(secrets.randbelow(10**10))  # WeChat's nonces differ per push
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    return {"signature": sha1_of(token, stamp, nonce), "timestamp": stamp, "nonce": nonce}


@dataclass
class Call:
    route: str
    query: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    errcode: int = 0


@dataclass
class Sent:
    touser: str
    msgtype: str
    content: dict[str, Any]

    @property
    def text(self) -> str:
        return str(self.content.get("content") or "")


class FakeWeChatOA(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(WeChatOAHandler)
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.sent: list[Sent] = []
        self.tokens: set[str] = set()
        self.media: dict[str, tuple[str, bytes]] = {}  # media id -> (content type, bytes)
        self._ids = itertools.count(1)

    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()

    def message_xml(
        self,
        text: str | None = "hello",
        *,
        openid: str = "oUser-ada",
        msg_id: str | None = None,
        msg_type: str = "text",
        extra: dict[str, str] | None = None,
    ) -> str:
        """A message to the account as WeChat builds it."""
        fields = {
            "ToUserName": ACCOUNT,
            "FromUserName": openid,
            "CreateTime": str(int(time.time())),
            "MsgType": msg_type,
            **({"Content": text} if msg_type == "text" and text is not None else {}),
            **(extra or {}),
            # MsgIds are unique on WeChat, across test runs too (the cache keeps a message's reply state).
            **({"MsgId": msg_id or str(secrets.randbelow(10**18) + 10**18)} if msg_type != "event" else {}),
        }
        inner = "".join(
            f"<{k}>{v}</{k}>" if k in ("CreateTime", "MsgId") else f"<{k}><![CDATA[{v}]]></{k}>"
            for k, v in fields.items()
        )
        return f"<xml>{inner}</xml>"

    @staticmethod
    def push(plain_xml: str, *, safe: bool = False, **sign: Any) -> tuple[bytes, str]:
        """The body and query string WeChat posts: plaintext, or in safe mode sealed in `<Encrypt>`."""
        query = {**signed_query(**{k: v for k, v in sign.items() if k != "app_id"}), "openid": "oUser-ada"}
        if not safe:
            return plain_xml.encode(), urlencode(query)
        encrypted = seal(plain_xml.encode(), app_id=sign.get("app_id", APP_ID))
        token = sign.get("token", TOKEN)
        query |= {"encrypt_type": "aes", "msg_signature": sha1_of(token, query["timestamp"], query["nonce"], encrypted)}
        body = f"<xml><ToUserName><![CDATA[{ACCOUNT}]]></ToUserName><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
        return body.encode(), urlencode(query)

    @staticmethod
    def open_reply(body: bytes, *, safe: bool = False) -> dict[str, str]:
        """The fields of a passive reply, as WeChat reads it (its signature checked in safe mode)."""
        root = ElementTree.fromstring(body)
        if safe:
            encrypted = root.findtext("Encrypt") or ""
            stamp, nonce = root.findtext("TimeStamp") or "", root.findtext("Nonce") or ""
            assert root.findtext("MsgSignature") == sha1_of(TOKEN, stamp, nonce, encrypted)
            plain, app_id = unseal(encrypted)
            assert app_id == APP_ID.encode()
            root = ElementTree.fromstring(plain)
        return {child.tag: child.text or "" for child in root}

    def calls_of(self, *routes: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.route in routes]

    def texts(self, openid: str) -> list[str]:
        with self.lock:
            return [s.text for s in self.sent if s.touser == openid and s.msgtype == "text"]


ROUTES = {
    "/cgi-bin/message/custom/send": "message.custom.send",
    "/cgi-bin/media/get": "media.get",
    "/cgi-bin/media/upload": "media.upload",
}


class WeChatOAHandler(PlatformHandler):
    fake: FakeWeChatOA

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        self._handle(b"")

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        self._handle(self.read_body())

    def _answer(self, body: dict[str, Any]) -> None:
        self.send_json(200, body)  # WeChat answers its errors with HTTP 200 too

    def _handle(self, raw: bytes) -> None:
        fake = self.fake
        query = self.query_params()
        if self.path_only == "/cgi-bin/token":
            right = (query.get("grant_type"), query.get("appid"), query.get("secret")) == (
                "client_credential",
                APP_ID,
                APP_SECRET,
            )
            with fake.lock:
                fake.calls.append(Call("token", query, errcode=0 if right else 40125))
                token = f"oatok-{next(fake._ids):08d}"
                if right:
                    fake.tokens.add(token)
            if not right:
                self._answer({"errcode": 40125, "errmsg": "invalid appsecret"})
                return
            self._answer({"access_token": token, "expires_in": 7200})
            return
        route = ROUTES.get(self.path_only)
        if route is None:
            self.send_json(404, {"errcode": 404, "errmsg": "not found"})
            return
        body: dict[str, Any] = json.loads(raw or b"{}") if route == "message.custom.send" else {}
        with fake.lock:
            given = query.get("access_token")
            errcode = 0 if given in fake.tokens else (42001 if given else 41001)
            fake.calls.append(Call(route, query, body, errcode=errcode))
        if errcode:
            self._answer({"errcode": errcode, "errmsg": "access_token expired" if given else "access_token missing"})
            return
        if route == "message.custom.send":
            kind = str(body.get("msgtype") or "")
            content = body.get(kind)
            if not isinstance(content, dict) or not body.get("touser"):
                self._answer({"errcode": 40008, "errmsg": "invalid message type"})
                return
            if kind == "image" and content.get("media_id") not in fake.media:
                self._answer({"errcode": 40007, "errmsg": "invalid media_id"})
                return
            with fake.lock:
                fake.sent.append(Sent(str(body["touser"]), kind, content))
            self._answer({"errcode": 0, "errmsg": "ok"})
        elif route == "media.get":
            found = fake.media.get(query.get("media_id", ""))
            if found is None:
                self._answer({"errcode": 40007, "errmsg": "invalid media_id"})
                return
            self.send_bytes(200, found[0], found[1])
        else:
            part = self.form_parts(raw).get("media")
            if part is None or not part.get_filename():
                self._answer({"errcode": 41005, "errmsg": "media data missing"})
                return
            payload = part.get_payload(decode=True)
            media_id = f"oa-media-{next(fake._ids):08d}"
            with fake.lock:
                fake.media[media_id] = (part.get_content_type(), payload if isinstance(payload, bytes) else b"")
            self._answer({"type": query.get("type"), "media_id": media_id, "created_at": int(time.time())})
