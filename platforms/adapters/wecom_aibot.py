"""WeCom AI bots (企业微信智能机器人), on the callback (API) mode: the URL check (`GET` with `echostr`) and
message pushes, JSON bodies `{"encrypt": ...}` sealed and signed as every WeCom callback is
(`wechat_crypto.WeChatCrypto`, with an empty receive id, as WeCom specifies for AI bots), and replies as
WeCom's stream messages.

How a reply streams: WeCom does not take messages from an AI bot through an API; it asks. The callback of
a user's message is answered with a stream message `{"msgtype": "stream", "stream": {"id", "finish",
"content"}}` (sealed the same way), and WeCom then calls back with `msgtype: stream` and that id, again
and again, until an answer says `finish: true` (for at most six minutes). So here a message's stream id
is derived from its `msgid` and put in the reply target; the delivery's writes (`send_text`, `edit_text`)
put the reply's text so far into the cache under that id, `reply_finished` marks it finished, and each
poll is answered with what the cache holds: the run's deltas are what the next poll returns. A reply too
long for one stream message (20,480 bytes) sends its later parts once through the message's
`response_url`; an event's reply (a card click) goes there too.

Pictures and files in are downloaded from the URL the message gives and decrypted with the bot's
EncodingAESKey (AES-256-CBC, as WeCom seals them). Files out are not supported (a stream message carries
text); neither are reactions.

Credentials: `token` and `encoding_aes_key` (the AI bot's API-mode settings in the WeCom admin console:
Security & Management → AI bots → the bot → API mode: URL, Token, EncodingAESKey), optional `bot_id` (the
bot's id, `aibotid` in its callbacks: a push for another bot is refused), optional `api_base_url` (a
proxy or a test's fake that `response_url`s may point at).

Events: `template_card_event` (a button on a card the bot sent) becomes `card.clicked`; `enter_chat` (a
user opening the bot's chat, once a day) and `feedback_event` are acknowledged and not handed on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from django.core.cache import cache

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.adapters.wechat_crypto import WeChatCrypto
from platforms.interface import (
    CredentialField,
    FetchedFile,
    InboundBatch,
    InboundRefusedError,
    InboundRequest,
    InboundUpdate,
    PlatformAdapter,
    PlatformAPIError,
    PlatformCapabilities,
    PlatformFileRef,
    ReplyTarget,
    SentMessage,
    inbound_json_object,
    malformed_unless_shaped,
    transport_failure,
)

REPLAY_WINDOW_SECONDS = 5 * 60
MAX_STREAM_BYTES = 20480
# WeCom stops asking six minutes after the message; a stream's state is kept a while longer.
STREAM_TTL_SECONDS = 15 * 60
REQUEST_TIMEOUT = 30.0
RESPONSE_HOSTS = ("qyapi.weixin.qq.com",)
FILE_KINDS = {"image": "image", "file": "file", "voice": "audio", "video": "video"}


def stream_id_of(bot_id: str, msgid: str) -> str:
    """The stream a message's reply is written to: the same for a redelivered message."""
    return hashlib.sha256(f"{bot_id}:{msgid}".encode()).hexdigest()[:32]


def decrypt_media(data: bytes, encoding_aes_key: str) -> bytes:
    """A downloaded picture or file, decrypted: AES-256-CBC keyed with the EncodingAESKey, its first 16
    bytes the IV, PKCS#7 padding to 32 bytes."""
    key = base64.b64decode(encoding_aes_key + "=")
    if len(key) != 32 or not data or len(data) % 16:
        raise ValueError("not a file WeCom sealed for this bot")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = decryptor.update(data) + decryptor.finalize()
    pad = plain[-1]
    if not 1 <= pad <= 32 or plain[-pad:] != bytes([pad]) * pad:
        raise ValueError("bad padding")
    return plain[:-pad]


class WeComAIBotAdapter(PlatformAdapter):
    platform: ClassVar[str] = "wecom_aibot"
    # Each poll shows the whole reply so far, so "editing" is writing the next poll's answer: cheap, and
    # WeCom asks about once a second.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=False,
        files_in=True,
        files_out=False,
        threads=False,
        max_message_chars=MAX_STREAM_BYTES,
        edit_interval_seconds=0.5,
        max_file_bytes=20 * 1024 * 1024,
        event_types=("card.clicked",),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("token", "encoding_aes_key", "bot_id", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "token",
            required=True,
            secret=True,
            help="The callback Token: WeCom admin console → Security & Management → AI bots → the bot → "
            "API mode (random, or your own).",
            link="https://work.weixin.qq.com/wework_admin/frame",
        ),
        CredentialField(
            "encoding_aes_key",
            required=True,
            secret=True,
            help="The callback EncodingAESKey (43 characters), on the same page.",
            link="https://work.weixin.qq.com/wework_admin/frame",
            pattern="^[A-Za-z0-9+/]{43}$",
            pattern_hint="43 Base64 characters",
        ),
        CredentialField(
            "bot_id",
            help="Optional: the AI bot's id (aibotid), on the bot's page; callbacks for another bot are refused.",
            link="https://work.weixin.qq.com/wework_admin/frame",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: a proxy's origin that response URLs may point at (default https://qyapi.weixin.qq.com).",
        ),
    )
    accepts_get: ClassVar[bool] = True

    _http: httpx.AsyncClient | None = None
    _checked: tuple[bytes, bytes] | None = None

    @staticmethod
    def text_length(text: str) -> int:
        return len(text.encode("utf-8"))

    def _secret(self, key: str) -> str:
        return str(self.credentials.get(key) or "").strip()

    def crypto(self) -> WeChatCrypto:
        return WeChatCrypto(
            token=self._secret("token"), encoding_aes_key=self._secret("encoding_aes_key"), receive_id=""
        )

    def _stream_key(self, stream_id: str) -> str:
        # Bot ids are unique per workspace only: the key is the bot's credentials' too.
        owner = hashlib.sha256(f"{self.bot_id}\n{self._secret('token')}\n{self._secret('encoding_aes_key')}".encode())
        return f"platforms:wecom_aibot:{owner.hexdigest()[:24]}:{stream_id}"

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        if not self._secret("token") or not self._secret("encoding_aes_key"):
            raise InboundRefusedError("forged", "the bot has no token or encoding_aes_key; copy them")
        try:
            crypto = self.crypto()
        except ValueError as exc:
            raise InboundRefusedError("forged", f"the bot's {exc}") from None
        query = request.query
        signature, timestamp, nonce = (query.get(k, "") for k in ("msg_signature", "timestamp", "nonce"))
        if not signature or not timestamp or not nonce:
            raise InboundRefusedError("forged", "the callback is not signed by WeCom", status=401)
        if request.method == "GET":
            encrypted = query.get("echostr", "")
        else:
            body = inbound_json_object(request.body, what="not a WeCom AI bot callback")
            given = body.get("encrypt")
            encrypted = given if isinstance(given, str) else ""
        if not encrypted:
            raise InboundRefusedError("malformed", "a WeCom AI bot callback without its ciphertext", status=400)
        if not hmac.compare_digest(signature.encode(), crypto.signature(timestamp, nonce, encrypted).encode()):
            raise InboundRefusedError("forged", "the WeCom signature does not match", status=401)
        try:
            age = abs(time.time() - int(timestamp))
        except (ValueError, OverflowError):
            raise InboundRefusedError("forged", "the callback timestamp is not a number", status=401) from None
        if age > REPLAY_WINDOW_SECONDS:
            raise InboundRefusedError("replayed", "the callback was signed more than five minutes ago", status=401)
        try:
            plain = crypto.decrypt(encrypted)
        except (ValueError, binascii.Error):
            raise InboundRefusedError("forged", "the callback does not decrypt for this bot", status=401) from None
        self._checked = (self._request_key(request), plain)

    @staticmethod
    def _request_key(request: InboundRequest) -> bytes:
        return request.body if request.method != "GET" else request.query.get("echostr", "").encode()

    def _plain(self, request: InboundRequest) -> bytes:
        if self._checked is None or self._checked[0] != self._request_key(request):
            self.verify(request)
        assert self._checked is not None
        return self._checked[1]

    def parse(self, request: InboundRequest) -> InboundBatch:
        plain = self._plain(request)
        if request.method == "GET":
            return InboundBatch(text_response=plain.decode("utf-8", "replace"))
        message = inbound_json_object(plain, what="not a WeCom AI bot message")
        with malformed_unless_shaped("not a WeCom AI bot message"):
            return self._batch(message)

    def _batch(self, message: dict[str, Any]) -> InboundBatch:
        wanted = self._secret("bot_id")
        if wanted and str(message.get("aibotid") or "") != wanted:
            raise InboundRefusedError("forged", "the callback is for another AI bot", status=401)
        kind = str(message.get("msgtype") or "")
        if kind == "stream":
            stream_id = str((message.get("stream") or {}).get("id") or "")
            state = cache.get(self._stream_key(stream_id)) if stream_id else None
            return self._answer_now(stream_id, state if isinstance(state, dict) else None)
        if kind == "event":
            update = self._event_update(message)
            return InboundBatch(updates=[update] if update is not None else [], text_response="")
        msgid = str(message.get("msgid") or "")
        sender = str((message.get("from") or {}).get("userid") or "")
        if not msgid or not sender:
            raise InboundRefusedError("malformed", "a WeCom AI bot message without msgid or from", status=400)
        text, files = self._content(kind, message)
        if not text and not files:
            return InboundBatch(text_response="")
        stream_id = stream_id_of(self.bot_id, msgid)
        key = self._stream_key(stream_id)
        # `add`: a redelivered message keeps the reply its stream already has.
        cache.add(key, {"content": "", "finish": False, "sent": False}, STREAM_TTL_SECONDS)
        update = InboundUpdate(envelope=self._envelope(message, kind, msgid, sender, text, stream_id), files=files)

        def first_answer(started: bool) -> tuple[str, str]:
            state = cache.get(key)
            state = state if isinstance(state, dict) else {"content": "", "finish": False}
            if not started and not state.get("content"):
                # No run will write to this stream (no binding answers, or it was handled before).
                state = {**state, "finish": True}
                cache.set(key, state, STREAM_TTL_SECONDS)
            return self._sealed_stream(stream_id, state), "application/json"

        return InboundBatch(updates=[update], reply_wait=first_answer)

    def _answer_now(self, stream_id: str, state: dict[str, Any] | None) -> InboundBatch:
        # A stream nobody writes to (unknown, expired) is answered finished, so WeCom stops asking.
        state = state or {"content": "", "finish": True}
        body = self._sealed_stream(stream_id, state)
        return InboundBatch(reply_wait=lambda _started: (body, "application/json"))

    def _sealed_stream(self, stream_id: str, state: dict[str, Any]) -> str:
        plain = {
            "msgtype": "stream",
            "stream": {
                "id": stream_id,
                "finish": bool(state.get("finish")),
                "content": str(state.get("content") or ""),
            },
        }
        return self.seal(plain)

    def seal(self, plain: dict[str, Any]) -> str:
        """A passive reply: the JSON encrypted and signed (`encrypt`, `msgsignature`, `timestamp`, `nonce`)."""
        crypto = self.crypto()
        encrypted = crypto.encrypt(json.dumps(plain, ensure_ascii=False).encode())
        timestamp, nonce = str(int(time.time())), secrets.token_hex(8)
        return json.dumps(
            {
                "encrypt": encrypted,
                "msgsignature": crypto.signature(timestamp, nonce, encrypted),
                "timestamp": int(timestamp),
                "nonce": nonce,
            }
        )

    def _content(self, kind: str, message: dict[str, Any]) -> tuple[str, list[PlatformFileRef]]:
        files: list[PlatformFileRef] = []

        def add(item: dict[str, Any], item_kind: str, index: int) -> None:
            url = str(item.get("url") or "")
            if url:
                name = str(item.get("filename") or f"{item_kind}-{index}" + (".jpg" if item_kind == "image" else ""))
                files.append(PlatformFileRef(ref={"url": url}, name=name, kind=FILE_KINDS.get(item_kind, "file")))

        if kind == "text":
            return str((message.get("text") or {}).get("content") or "").strip(), files
        if kind == "voice":
            # WeCom transcribes voice messages for AI bots; the words are the message.
            return str((message.get("voice") or {}).get("content") or "").strip(), files
        if kind in ("image", "file"):
            add(message.get(kind) or {}, kind, 0)
            return "", files
        if kind == "mixed":
            pieces: list[str] = []
            for index, item in enumerate((message.get("mixed") or {}).get("msg_item") or ()):
                if not isinstance(item, dict):
                    continue
                item_kind = str(item.get("msgtype") or "")
                if item_kind == "text":
                    pieces.append(str((item.get("text") or {}).get("content") or ""))
                elif item_kind == "image":
                    add(item.get("image") or {}, "image", index)
            return "\n".join(p for p in pieces if p).strip(), files
        return "", files

    def _target(self, message: dict[str, Any], sender: str, stream_id: str | None) -> ReplyTarget:
        in_group = str(message.get("chattype") or "") == "group"
        chat_id = str(message.get("chatid") or "") if in_group else f"user:{sender}"
        extra: dict[str, Any] = {"chat_type": "group" if in_group else "single"}
        if stream_id:
            extra["stream_id"] = stream_id
        if message.get("response_url"):
            extra["response_url"] = str(message["response_url"])
            extra["response_url_expires"] = int(time.time()) + 3600
        return ReplyTarget(chat_id=chat_id or f"user:{sender}", extra=extra)

    def _envelope(
        self, message: dict[str, Any], kind: str, msgid: str, sender: str, text: str, stream_id: str
    ) -> dict[str, Any]:
        target = self._target(message, sender, stream_id)
        in_group = target.extra["chat_type"] == "group"
        # The response URL lets its holder post into the chat for an hour: it stays in the reply target.
        raw = {k: v for k, v in message.items() if k != "response_url"}
        return {
            "event_id": f"wecom_aibot:{self.bot_id}:{msgid}",
            "event_type": "message.received",
            "source_event_type": kind,
            "actor": {"actor_type": "user", "actor_id": sender, "actor_name": sender[:255]},
            "subject": {
                "subject_type": "message",
                "subject_id": msgid,
                "data": {"chat_type": "group" if in_group else "private"},
            },
            "input": {"text": text or None},
            "data": {
                "chat_id": target.chat_id,
                "chat_type": "group" if in_group else "private",
                "reply_target": target.as_data(),
                "raw": raw,
            },
        }

    def _event_update(self, message: dict[str, Any]) -> InboundUpdate | None:
        event = message.get("event") or {}
        if str(event.get("eventtype") or "") != "template_card_event":
            return None  # enter_chat, feedback_event: acknowledged
        card = event.get("template_card_event") or {}
        msgid = str(message.get("msgid") or "")
        sender = str((message.get("from") or {}).get("userid") or "")
        if not msgid or not sender:
            raise InboundRefusedError("malformed", "a WeCom AI bot event without msgid or from", status=400)
        target = self._target(message, sender, None)
        in_group = target.extra["chat_type"] == "group"
        return InboundUpdate(
            envelope={
                "event_id": f"wecom_aibot:{self.bot_id}:{msgid}",
                "event_type": "card.clicked",
                "source_event_type": "template_card_event",
                "actor": {"actor_type": "user", "actor_id": sender, "actor_name": sender[:255]},
                "subject": {
                    "subject_type": "message",
                    "subject_id": str(card.get("task_id") or msgid),
                    "data": {"chat_type": "group" if in_group else "private"},
                },
                "input": {"text": None},
                "data": {
                    "chat_id": target.chat_id,
                    "chat_type": "group" if in_group else "private",
                    "target_message_id": str(card.get("task_id") or ""),
                    "action": {
                        "event_key": str(card.get("event_key") or ""),
                        "task_id": str(card.get("task_id") or ""),
                    },
                    "reply_target": target.as_data(),
                    "raw": {k: v for k, v in message.items() if k != "response_url"},
                },
            }
        )

    # -- HTTP -----------------------------------------------------------------------------------
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=REQUEST_TIMEOUT,
                follow_redirects=False,
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def _request(self, what: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.http().request(method, url, **kwargs)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"WeCom {what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"WeCom {what}: {exc}", exc) from exc

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        url = str(ref.ref.get("url") or "")
        if not url.startswith(("https://", "http://")):
            raise PlatformAPIError("the file reference has no URL")
        response = await self._request("file download", "GET", url)
        if response.status_code != 200:
            raise PlatformAPIError(
                f"WeCom did not give the file (HTTP {response.status_code})", retryable=response.status_code >= 500
            )
        try:
            data = decrypt_media(response.content, self._secret("encoding_aes_key"))
        except (ValueError, binascii.Error) as exc:
            raise PlatformAPIError(f"WeCom file: {exc}") from None
        mime_type = ref.mime_type or ("image/jpeg" if ref.kind == "image" else "application/octet-stream")
        return FetchedFile(data=data, name=ref.name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    async def _stream_write(self, stream_id: str, text: str, *, finish: bool | None = None) -> dict[str, Any]:
        key = self._stream_key(stream_id)
        state = await cache.aget(key)
        state = dict(state) if isinstance(state, dict) else {"content": "", "finish": False, "sent": False}
        state["content"] = text
        state["sent"] = True
        if finish is not None:
            state["finish"] = finish
        await cache.aset(key, state, STREAM_TTL_SECONDS)
        return state

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        stream_id = str(target.extra.get("stream_id") or "")
        if stream_id:
            state = await cache.aget(self._stream_key(stream_id))
            held = state if isinstance(state, dict) else {}
            if not held.get("sent") and not held.get("finish"):
                await self._stream_write(stream_id, text)
                return SentMessage(chat_id=target.chat_id, message_id=stream_id)
        # A later part of a long reply, or a reply with no stream (a card click): the response URL, once.
        await self._respond(target, text)
        return SentMessage(chat_id=target.chat_id, message_id="")

    async def edit_text(self, message: SentMessage, text: str) -> None:
        if not message.message_id:
            raise PlatformAPIError("WeCom AI bot messages sent through a response URL cannot be edited")
        await self._stream_write(message.message_id, text)

    async def reply_finished(self, target: ReplyTarget, sent: list[SentMessage], *, failed: bool) -> None:
        stream_id = str(target.extra.get("stream_id") or "")
        if not stream_id:
            return
        key = self._stream_key(stream_id)
        state = await cache.aget(key)
        state = dict(state) if isinstance(state, dict) else {"content": ""}
        state["finish"] = True
        await cache.aset(key, state, STREAM_TTL_SECONDS)

    def _response_url(self, target: ReplyTarget) -> str:
        url = str(target.extra.get("response_url") or "")
        expires = target.extra.get("response_url_expires")
        if not url or not isinstance(expires, int) or expires <= time.time():
            raise PlatformAPIError("the WeCom AI bot has no live response URL for this chat")
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        own = self.api_base_url and host == (urlsplit(self.api_base_url).hostname or "").lower()
        official = parts.scheme == "https" and host in RESPONSE_HOSTS
        if not (own or official):
            raise PlatformAPIError("the response URL is not on WeCom's host")
        return url

    async def _respond(self, target: ReplyTarget, text: str) -> None:
        url = self._response_url(target)
        body = {"msgtype": "markdown", "markdown": {"content": text}}
        response = await self._request("response_url", "POST", url, json=body)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        code = int(answer.get("errcode") or 0) if isinstance(answer, dict) else -1
        if response.status_code >= 400 or code != 0:
            detail = answer.get("errmsg") if isinstance(answer, dict) else response.text[:200]
            # Anything but an answer saying it was not done leaves the outcome unknown.
            raise PlatformAPIError(
                f"WeCom response_url: {detail} (errcode {code})", outcome_unknown=response.status_code >= 500
            )

    async def identity(self) -> str:
        self.crypto()
        return "WeCom AI bots have no identity call: the token and EncodingAESKey are well formed"

    async def webhook_register(self, url: str) -> str:
        return (
            f"paste {url} as the AI bot's URL (admin console → Security & Management → AI bots → the bot → API "
            "mode), with the bot's Token and EncodingAESKey"
        )
