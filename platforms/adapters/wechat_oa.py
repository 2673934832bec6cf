"""WeChat Official Accounts (微信公众号), on httpx: the account's server callback in — the URL check (`GET`
with `signature` and `echostr`) and message pushes, in plaintext mode or in safe mode (AES-encrypted as
WeCom's callbacks are, `wechat_crypto.WeChatCrypto` with the AppID as receive id, signed in `msg_signature`)
—, and replies out two ways:

- passively, as the push's own answer: WeChat waits 5 s for it. The webhook waits for the run's reply
  until `PASSIVE_WINDOW_SECONDS` after the push arrived (`passive_reply_wait`); a run that ends in time
  has its first message answered as reply XML (sealed in safe mode).
- through the customer-service API (`message/custom/send`, with an access token from `/cgi-bin/token` kept
  until shortly before it expires and bought again when WeChat calls it stale, errcode 40001/40014/42001)
  for a run that ends later, and for a reply's further messages and images.

The web process (waiting) and the worker (delivering) agree through the cache on which of the two carries
the first message: the worker offers it, the webhook takes it while its window lasts, and whoever is first
to claim it (`cache.add`) decides; the other stands aside. So a reply is sent once, whichever way.

Credentials: `app_id` and `app_secret` (Official Accounts Platform → Settings and Development → Basic
Configuration), `token` and, for safe mode, `encoding_aes_key` (the same page's Server Configuration, where
the callback URL is pasted), optional `api_base_url` (default `https://api.weixin.qq.com`). WeChat requires
the calling server's address in the account's IP whitelist before the API answers.

Event pushes: `subscribe` is `member.joined`, `unsubscribe` `member.left`, a menu `CLICK` `card.clicked`
(docs/platform-events.md); a run answering a subscription greets the follower like a message's reply.

Text and images in (images fetched with `media/get`; a voice message WeChat transcribed comes in as its
text); follow and other events are acknowledged. Messages cannot be edited.
"""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import hmac
import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, ClassVar
from xml.sax.saxutils import escape

import httpx
from django.core.cache import cache

from platforms.adapters.wechat_api import WeChatApiAdapter
from platforms.adapters.wechat_crypto import WeChatCrypto, sha1_signature, xml_document, xml_text
from platforms.interface import (
    CredentialField,
    FetchedFile,
    InboundBatch,
    InboundRefusedError,
    InboundRequest,
    InboundUpdate,
    OutboundFile,
    PlatformAPIError,
    PlatformCapabilities,
    PlatformFileRef,
    ReplyTarget,
    SentMessage,
    malformed_unless_shaped,
    platform_event_envelope,
)

DEFAULT_API_BASE_URL = "https://api.weixin.qq.com"
# WeChat does not say how old a signed push may be; it retries within seconds. Five minutes either way, as
# the other platforms, keeps a captured request from being replayed later.
REPLAY_WINDOW_SECONDS = 5 * 60
# WeChat gives up on an answer after 5 s (and retries); a second is left for the answer to travel.
PASSIVE_WINDOW_SECONDS = 4.0
PASSIVE_POLL_SECONDS = 0.05
PASSIVE_KEY_SECONDS = 120
# errcode: 40001 invalid credential (a stale token), 40014 invalid token, 42001 token expired: bought
# again once. 45009 / 45047: rate limits.
TOKEN_STALE = frozenset({40001, 40014, 42001})
RATE_LIMITED = frozenset({45009, 45047})
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif"})
MAX_IMAGE_BYTES = 10 * 1024 * 1024
SUCCESS = ("success", "text/plain; charset=utf-8")


def _event_key(message: ET.Element) -> str:
    """What names an event push (which has no MsgId): its sender, time and event."""
    parts = (xml_text(message, "FromUserName"), xml_text(message, "CreateTime"), xml_text(message, "Event"))
    return ":".join(parts)


def _passive_keys(bot_id: str, msg_id: str) -> tuple[str, str]:
    base = f"platforms:wechat_oa:passive:{hashlib.sha256(f'{bot_id}:{msg_id}'.encode()).hexdigest()}"
    return f"{base}:offer", f"{base}:claim"


def passive_reply_wait(
    *, bot_id: str, msg_id: str, until: float, started: bool, seal: Callable[[str], str]
) -> tuple[str, str]:
    """The webhook's side (on a web thread): the run's first message offered by the worker before `until`
    and claimed here, as `seal(text)`; else `success`, and the worker sends it through the API."""
    offer_key, claim_key = _passive_keys(bot_id, msg_id)
    while started and time.time() < until:
        if cache.get(claim_key) is not None:
            return SUCCESS  # a redelivery of a message already answered, or the worker went ahead
        offered = cache.get(offer_key)
        if isinstance(offered, str):
            if cache.add(claim_key, "passive", timeout=PASSIVE_KEY_SECONDS):
                return seal(offered), "application/xml; charset=utf-8"
            return SUCCESS
        time.sleep(PASSIVE_POLL_SECONDS)
    # Too late: a reply offered from now on goes through the API at once.
    cache.add(claim_key, "api", timeout=PASSIVE_KEY_SECONDS)
    return SUCCESS


def _reply_xml(*, to_user: str, from_user: str, text: str) -> str:
    def cdata(value: str) -> str:
        return "<![CDATA[" + value.replace("]]>", "]]]]><![CDATA[>") + "]]>"

    return (
        f"<xml><ToUserName>{cdata(to_user)}</ToUserName><FromUserName>{cdata(from_user)}</FromUserName>"
        f"<CreateTime>{int(time.time())}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
        f"<Content>{cdata(text)}</Content></xml>"
    )


class WeChatOAAdapter(WeChatApiAdapter):
    platform: ClassVar[str] = "wechat_oa"
    # A customer-service text may carry 2,048 bytes (`text_length` counts UTF-8 bytes); one write a second
    # keeps well inside the API's per-user pace.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=False,
        reaction=False,
        files_in=True,
        files_out=True,
        threads=False,
        max_message_chars=2048,
        edit_interval_seconds=1.0,
        max_file_bytes=MAX_IMAGE_BYTES,
        event_types=("member.joined", "member.left", "card.clicked"),
        groups=False,
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("app_id", "app_secret", "token", "encoding_aes_key", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "app_id",
            required=True,
            help="The account's AppID: Official Accounts Platform → Settings and Development → Basic Configuration.",
            link="https://mp.weixin.qq.com/",
        ),
        CredentialField(
            "app_secret",
            required=True,
            secret=True,
            help="The AppSecret, on the same page (shown once when reset; add this server to the IP whitelist).",
            link="https://mp.weixin.qq.com/",
        ),
        CredentialField(
            "token",
            required=True,
            secret=True,
            help="The server Token: Basic Configuration → Server Configuration (your own, 3-32 characters).",
            link="https://mp.weixin.qq.com/",
        ),
        CredentialField(
            "encoding_aes_key",
            secret=True,
            help="The EncodingAESKey (43 characters), on the same page: needed for safe mode; "
            "when set, plaintext pushes are refused.",
            link="https://mp.weixin.qq.com/",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: the API's origin (default https://api.weixin.qq.com), for a proxy.",
        ),
    )
    accepts_get: ClassVar[bool] = True

    api_label: ClassVar[str] = "WeChat"
    default_api_base_url: ClassVar[str] = DEFAULT_API_BASE_URL
    app_id_key: ClassVar[str] = "app_id"
    app_secret_key: ClassVar[str] = "app_secret"
    token_path: ClassVar[str] = "/cgi-bin/token"
    token_stale: ClassVar[frozenset[int]] = TOKEN_STALE
    rate_limited: ClassVar[frozenset[int]] = RATE_LIMITED

    _checked: tuple[bytes, ET.Element, bool] | None = None

    @staticmethod
    def text_length(text: str) -> int:
        return len(text.encode("utf-8"))

    def crypto(self) -> WeChatCrypto:
        return WeChatCrypto(
            token=self._secret("token"),
            encoding_aes_key=self._secret("encoding_aes_key"),
            receive_id=self._secret("app_id"),
        )

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        token = self._secret("token")
        if not token or not self._secret("app_id"):
            raise InboundRefusedError("forged", "the bot has no token or app_id; copy them")
        query = request.query
        signature, timestamp, nonce = (query.get(k, "") for k in ("signature", "timestamp", "nonce"))
        if not signature or not timestamp or not nonce:
            raise InboundRefusedError("forged", "the push is not signed by WeChat", status=401)
        if not hmac.compare_digest(signature.encode(), sha1_signature(token, timestamp, nonce).encode()):
            raise InboundRefusedError("forged", "the WeChat signature does not match", status=401)
        try:
            age = abs(time.time() - int(timestamp))
        except (ValueError, OverflowError):
            raise InboundRefusedError("forged", "the push's timestamp is not a number", status=401) from None
        if age > REPLAY_WINDOW_SECONDS:
            raise InboundRefusedError("replayed", "the push was signed more than five minutes ago", status=401)
        if request.method == "GET":
            return  # the URL check: `echostr` goes back as it is (in safe mode too)
        envelope = xml_document(request.body, "not a WeChat push")
        encrypted = xml_text(envelope, "Encrypt")
        if query.get("encrypt_type") == "aes" or encrypted:
            message = self._decrypted(query, encrypted, timestamp, nonce)
            self._checked = (request.body, message, True)
            return
        if self._secret("encoding_aes_key"):
            # Safe mode is set up: a plaintext body is not signed (the signature covers no body), so it is
            # not taken.
            raise InboundRefusedError("forged", "a plaintext push to a bot set up for safe mode", status=401)
        # In plaintext mode the signature covers the token, timestamp and nonce only: one signature carries
        # one body (a retry of the same body passes; another body under a seen signature does not).
        seen = cache.get_or_set(
            f"platforms:wechat_oa:signature:{self.bot_id}:{signature}",
            hashlib.sha256(request.body).hexdigest(),
            timeout=2 * REPLAY_WINDOW_SECONDS,
        )
        if seen != hashlib.sha256(request.body).hexdigest():
            raise InboundRefusedError("replayed", "this signature came with another body before", status=401)
        self._checked = (request.body, envelope, False)

    def _decrypted(self, query: Any, encrypted: str, timestamp: str, nonce: str) -> ET.Element:
        if not self._secret("encoding_aes_key"):
            raise InboundRefusedError("forged", "a safe-mode push, and the bot has no encoding_aes_key", status=401)
        try:
            crypto = self.crypto()
        except ValueError as exc:
            raise InboundRefusedError("forged", f"the bot's {exc}") from None
        if not encrypted:
            raise InboundRefusedError("malformed", "a safe-mode push without its ciphertext", status=400)
        given = str(query.get("msg_signature") or "")
        if not hmac.compare_digest(given.encode(), crypto.signature(timestamp, nonce, encrypted).encode()):
            raise InboundRefusedError("forged", "the WeChat msg_signature does not match", status=401)
        try:
            plain = crypto.decrypt(encrypted)
        except (ValueError, binascii.Error):
            raise InboundRefusedError("forged", "the push does not decrypt for this account", status=401) from None
        return xml_document(plain, "not a WeChat message")

    def _message(self, request: InboundRequest) -> tuple[ET.Element, bool]:
        if self._checked is None or self._checked[0] != request.body:
            self.verify(request)
        assert self._checked is not None
        return self._checked[1], self._checked[2]

    def parse(self, request: InboundRequest) -> InboundBatch:
        if request.method == "GET":
            self.verify(request)
            return InboundBatch(text_response=request.query.get("echostr", ""))
        message, sealed = self._message(request)
        until = time.time() + PASSIVE_WINDOW_SECONDS
        with malformed_unless_shaped("not a WeChat message"):
            update = self._update(message, passive_until=until)
        if update is None:
            return InboundBatch(text_response="success")
        seal = self._sealer(
            request, to_user=xml_text(message, "FromUserName"), from_user=xml_text(message, "ToUserName"), sealed=sealed
        )
        msg_id = xml_text(message, "MsgId") or _event_key(message)

        def reply_wait(started: bool) -> tuple[str, str]:
            return passive_reply_wait(bot_id=self.bot_id, msg_id=msg_id, until=until, started=started, seal=seal)

        return InboundBatch(updates=[update], reply_wait=reply_wait)

    def _sealer(self, request: InboundRequest, *, to_user: str, from_user: str, sealed: bool) -> Callable[[str], str]:
        def seal(text: str) -> str:
            xml = _reply_xml(to_user=to_user, from_user=from_user, text=text)
            if not sealed:
                return xml
            crypto = self.crypto()
            encrypted = crypto.encrypt(xml.encode())
            stamp, nonce = str(int(time.time())), str(request.query.get("nonce") or "0")
            return (
                f"<xml><Encrypt><![CDATA[{encrypted}]]></Encrypt>"
                f"<MsgSignature><![CDATA[{crypto.signature(stamp, nonce, encrypted)}]]></MsgSignature>"
                f"<TimeStamp>{stamp}</TimeStamp><Nonce><![CDATA[{escape(nonce)}]]></Nonce></xml>"
            )

        return seal

    def _update(self, message: ET.Element, *, passive_until: float) -> InboundUpdate | None:
        kind = xml_text(message, "MsgType")
        if kind == "event":
            return self._event(message, passive_until=passive_until)
        if not kind:
            return None
        msg_id = xml_text(message, "MsgId")
        sender = xml_text(message, "FromUserName")
        if not msg_id or not sender:
            raise InboundRefusedError("malformed", "a WeChat message without MsgId or FromUserName", status=400)
        files: list[PlatformFileRef] = []
        text = ""
        if kind == "text":
            text = xml_text(message, "Content")
        elif kind == "image" and xml_text(message, "MediaId"):
            files.append(
                PlatformFileRef(ref={"media_id": xml_text(message, "MediaId")}, name="image.jpg", kind="image")
            )
        elif kind == "voice":
            text = xml_text(message, "Recognition")  # when the account has speech recognition on
        elif kind == "link":
            text = "\n".join(p for p in (xml_text(message, "Title"), xml_text(message, "Url")) if p)
        if not text and not files:
            return None
        try:
            event_time = float(xml_text(message, "CreateTime"))
        except ValueError:
            event_time = time.time()
        target = ReplyTarget(
            chat_id=sender,
            # Until when the webhook waits to answer the push with the reply (`_passive_taken`).
            extra={"msg_id": msg_id, "passive_until": passive_until},
        )
        raw = {child.tag: (child.text or "") for child in message if len(child) == 0}
        envelope = {
            "event_id": f"wechat_oa:{self.bot_id}:{msg_id}",
            "event_type": "message.received",
            "source_event_type": kind,
            "actor": {"actor_type": "user", "actor_id": sender, "actor_name": sender[:255]},
            "subject": {"subject_type": "message", "subject_id": msg_id, "data": {"chat_type": "private"}},
            "input": {"text": text or None},
            "data": {"chat_id": sender, "chat_type": "private", "reply_target": target.as_data(), "raw": raw},
            "event_time": event_time,
        }
        return InboundUpdate(envelope=envelope, files=files)

    def _event(self, message: ET.Element, *, passive_until: float) -> InboundUpdate | None:
        """An event push (docs/platform-events.md): `subscribe` → `member.joined` (a user followed the
        account: the chat with them begins, and the passive answer may greet them), `unsubscribe` →
        `member.left`, a menu `CLICK` → `card.clicked` (its EventKey in `data.action`). Location reports,
        scans and menu links are acknowledged only. Events carry no MsgId: the sender and time name them,
        as WeChat's own advice on deduplicating events says."""
        event = xml_text(message, "Event").lower()
        sender = xml_text(message, "FromUserName")
        kinds = {"subscribe": "member.joined", "unsubscribe": "member.left", "click": "card.clicked"}
        if event not in kinds or not sender:
            return None
        key = _event_key(message)
        try:
            event_time = float(xml_text(message, "CreateTime"))
        except ValueError:
            event_time = time.time()
        action = xml_text(message, "EventKey")
        envelope = platform_event_envelope(
            event_id=f"wechat_oa:{self.bot_id}:{key}",
            event_type=kinds[event],
            source_event_type=f"event.{event}",
            chat_id=sender,
            chat_type="private",
            actor_id=sender,
            action=action if event == "click" else None,
            reply_target=ReplyTarget(chat_id=sender, extra={"msg_id": key, "passive_until": passive_until}),
            raw={child.tag: (child.text or "") for child in message if len(child) == 0},
            event_time=event_time,
        )
        return InboundUpdate(envelope=envelope)

    # -- HTTP (platforms.adapters.wechat_api) ------------------------------------------------------
    def token_params(self) -> dict[str, str]:
        return {
            "grant_type": "client_credential",
            "appid": self._secret("app_id"),
            "secret": self._secret("app_secret"),
        }

    def answer_is_file(self, response: httpx.Response) -> bool:
        # Errors come as JSON (or text/plain JSON); `media/get` answers the file itself.
        return not response.headers.get("content-type", "").startswith(("application/json", "text/plain"))

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        media_id = str(ref.ref.get("media_id") or "")
        if not media_id:
            raise PlatformAPIError("the file reference has no media_id")
        response = await self.call("media.get", "GET", "/cgi-bin/media/get", params={"media_id": media_id})
        mime_type = response.headers.get("content-type", "").split(";")[0].strip() or ref.mime_type
        return FetchedFile(data=response.content, name=ref.name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    async def _passive_taken(self, target: ReplyTarget, text: str) -> bool:
        """The worker's side: offer the reply's first message to the webhook still waiting for it; True
        when the webhook took it (then it is the push's answer and nothing is sent here)."""
        until, msg_id = target.extra.get("passive_until"), target.extra.get("msg_id")
        if not isinstance(until, int | float) or not msg_id or time.time() >= until:
            return False
        offer_key, claim_key = _passive_keys(self.bot_id, str(msg_id))
        if not await cache.aadd(offer_key, text, timeout=PASSIVE_KEY_SECONDS):
            return False  # the first message was offered already: this is a further one
        while time.time() < until:
            claim = await cache.aget(claim_key)
            if claim is not None:
                return bool(claim == "passive")
            await asyncio.sleep(PASSIVE_POLL_SECONDS)
        if await cache.aadd(claim_key, "api", timeout=PASSIVE_KEY_SECONDS):
            return False
        return bool(await cache.aget(claim_key) == "passive")

    async def _custom_send(self, target: ReplyTarget, msgtype: str, content: dict[str, Any]) -> SentMessage:
        body = {"touser": target.chat_id, "msgtype": msgtype, msgtype: content}
        # Sent as UTF-8 JSON: WeChat shows `\uXXXX` escapes literally.
        data = _json_bytes(body)
        await self.call(
            "message.custom.send",
            "POST",
            "/cgi-bin/message/custom/send",
            content=data,
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        return SentMessage(chat_id=target.chat_id, message_id="")

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        if await self._passive_taken(target, text):
            return SentMessage(chat_id=target.chat_id, message_id=f"passive:{target.extra.get('msg_id')}")
        return await self._custom_send(target, "text", {"content": text})

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        if file.mime_type not in IMAGE_TYPES or len(file.data) > MAX_IMAGE_BYTES:
            raise PlatformAPIError("WeChat customer-service messages carry images (JPEG, PNG, GIF up to 10 MB) only")
        response = await self.call(
            "media.upload",
            "POST",
            "/cgi-bin/media/upload",
            params={"type": "image"},
            files={"media": (file.name, file.data, file.mime_type)},
        )
        media_id = str(self.json_object(response).get("media_id") or "")
        if not media_id:
            raise PlatformAPIError("WeChat media.upload: the answer carries no media_id")
        sent = await self._custom_send(target, "image", {"media_id": media_id})
        if file.caption:
            await self._custom_send(target, "text", {"content": file.caption})
        return sent

    async def identity(self) -> str:
        await self.access_token()
        return f"WeChat issued an access token to the account {self._secret('app_id')}"

    async def webhook_register(self, url: str) -> str:
        """The callback URL is set on the platform's console only; this checks app_id and app_secret (by
        buying a token) and says what to paste where."""
        await self.access_token()
        return (
            f"paste {url} as the URL under Basic Configuration → Server Configuration, with the bot's Token "
            "(and EncodingAESKey for safe mode), and add this server's address to the IP whitelist"
        )


def _json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")
