"""WeCom (企业微信) internal apps (自建应用), on httpx: the app's message callback in — the callback URL
check (`GET` with `echostr`) and message pushes, both AES-encrypted and signed as WeCom defines it (see
`wechat_crypto.WeChatCrypto`, shared with Official Accounts) —, replies out through the app API
(`message/send`, with an access token from `gettoken` kept until shortly before it expires and bought
again when WeCom says it is stale, errcode 40014/42001).
Images, voice, video and files in are fetched with `media/get`; files out are uploaded with
`media/upload` and sent as `image` / `file` messages. WeCom apps cannot edit a sent message, so a reply
is sent once, whole, when the run ends.

Credentials: `corp_id` (My Company → Company Information → Company ID), `corp_secret` and `agent_id`
(App Management → the app: Secret and AgentId), `token` and `encoding_aes_key` (the app's "Receive
Messages" → "Set API Receive" page, where the callback URL is pasted), optional `api_base_url` (the API's
origin, default `https://qyapi.weixin.qq.com`, for a proxy). WeCom requires the calling server's address
in the app's trusted IP list before `message/send` works.

An internal app's messages come from one person in the app's own chat, so every message is answered, to
that person. Events (entering the app, menu clicks) are acknowledged and not handed on yet. The webhook
answers a push with an empty body: the reply goes through the API, not as a passive reply.
"""

from __future__ import annotations

import binascii
import hmac
import time
import xml.etree.ElementTree as ET  # the element type and ParseError only: parsing is defusedxml's
from typing import Any, ClassVar

import httpx

from platforms.adapters.wechat_api import WeChatApiAdapter
from platforms.adapters.wechat_crypto import WeChatCrypto
from platforms.adapters.wechat_crypto import xml_document as _xml
from platforms.adapters.wechat_crypto import xml_text as _field
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
)

DEFAULT_API_BASE_URL = "https://qyapi.weixin.qq.com"
# WeCom does not say how old a signed callback may be; it retries within seconds, and a URL check is made
# when the admin saves it. Five minutes either way, as Slack and Lark, keeps a captured request from
# being replayed later.
REPLAY_WINDOW_SECONDS = 5 * 60
# errcode: 40014 invalid token, 42001 token expired (bought again once); 45009 / 45033 rate limits.
TOKEN_STALE = frozenset({40014, 42001})
RATE_LIMITED = frozenset({45009, 45033})
IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})
MAX_IMAGE_BYTES = 10 * 1024 * 1024
MEDIA_KINDS = {"image": "image", "voice": "audio", "video": "video", "file": "file"}
MEDIA_NAMES = {"image": "image.jpg", "voice": "voice.amr", "video": "video.mp4", "file": "file"}


class WeComAdapter(WeChatApiAdapter):
    platform: ClassVar[str] = "wecom"
    # A text message may carry 2,048 bytes (`text_length` counts UTF-8 bytes). WeCom allows an app 30
    # messages a minute to one person: one write every 2 s stays under it.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=False,
        reaction=False,
        files_in=True,
        files_out=True,
        threads=False,
        max_message_chars=2048,
        edit_interval_seconds=2.0,
        max_file_bytes=20 * 1024 * 1024,
        groups=False,  # an app's messages come one to one
    )
    credential_keys: ClassVar[tuple[str, ...]] = (
        "corp_id",
        "corp_secret",
        "agent_id",
        "token",
        "encoding_aes_key",
        "api_base_url",
    )
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "corp_id",
            required=True,
            help="The company's CorpID: WeCom admin console → My Company → Company Information → Company ID.",
            link="https://work.weixin.qq.com/wework_admin/frame#apps",
        ),
        CredentialField(
            "corp_secret",
            required=True,
            secret=True,
            help="The app's Secret: admin console → App Management → the app → Secret (sent to the admin's WeCom).",
            link="https://work.weixin.qq.com/wework_admin/frame#apps",
        ),
        CredentialField(
            "agent_id",
            required=True,
            types=("string", "integer"),
            help="The app's AgentId, on the same page.",
            link="https://work.weixin.qq.com/wework_admin/frame#apps",
        ),
        CredentialField(
            "token",
            required=True,
            secret=True,
            help="The callback Token: the app → Receive Messages → Set API Receive (random, or your own).",
            link="https://work.weixin.qq.com/wework_admin/frame#apps",
        ),
        CredentialField(
            "encoding_aes_key",
            required=True,
            secret=True,
            help="The callback EncodingAESKey (43 characters), on the same page.",
            link="https://work.weixin.qq.com/wework_admin/frame#apps",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: the API's origin (default https://qyapi.weixin.qq.com), for a proxy.",
        ),
    )
    accepts_get: ClassVar[bool] = True

    api_label: ClassVar[str] = "WeCom"
    default_api_base_url: ClassVar[str] = DEFAULT_API_BASE_URL
    app_id_key: ClassVar[str] = "corp_id"
    app_secret_key: ClassVar[str] = "corp_secret"
    token_path: ClassVar[str] = "/cgi-bin/gettoken"
    token_stale: ClassVar[frozenset[int]] = TOKEN_STALE
    rate_limited: ClassVar[frozenset[int]] = RATE_LIMITED

    _checked: tuple[bytes, ET.Element] | None = None

    @staticmethod
    def text_length(text: str) -> int:
        return len(text.encode("utf-8"))

    def crypto(self) -> WeChatCrypto:
        return WeChatCrypto(
            token=self._secret("token"),
            encoding_aes_key=self._secret("encoding_aes_key"),
            receive_id=self._secret("corp_id"),
        )

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        if not self._secret("token") or not self._secret("encoding_aes_key") or not self._secret("corp_id"):
            raise InboundRefusedError("forged", "the bot has no token, encoding_aes_key or corp_id; copy them")
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
            envelope = _xml(request.body, "not a WeCom callback")
            encrypted = _field(envelope, "Encrypt")
        if not encrypted:
            raise InboundRefusedError("malformed", "a WeCom callback without its ciphertext", status=400)
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
            raise InboundRefusedError("forged", "the callback does not decrypt for this app", status=401) from None
        self._checked = (request.body if request.method != "GET" else encrypted.encode(), _plain_element(plain))

    def _message(self, request: InboundRequest) -> ET.Element:
        """The decrypted message `verify` read (verified again if `parse` is called on its own)."""
        key = request.body if request.method != "GET" else request.query.get("echostr", "").encode()
        if self._checked is None or self._checked[0] != key:
            self.verify(request)
        assert self._checked is not None
        return self._checked[1]

    def parse(self, request: InboundRequest) -> InboundBatch:
        message = self._message(request)
        if request.method == "GET":
            # The URL check: WeCom wants the decrypted echostr back, as it is.
            return InboundBatch(text_response=message.text or "")
        with malformed_unless_shaped("not a WeCom message"):
            update = self._update(message)
        return InboundBatch(updates=[update] if update is not None else [], text_response="")

    def _update(self, message: ET.Element) -> InboundUpdate | None:
        kind = _field(message, "MsgType")
        if kind == "event" or not kind:
            return None  # entering the app, menu clicks, location reports: acknowledged
        msg_id = _field(message, "MsgId")
        sender = _field(message, "FromUserName")
        if not msg_id or not sender:
            raise InboundRefusedError("malformed", "a WeCom message without MsgId or FromUserName", status=400)
        files: list[PlatformFileRef] = []
        text = ""
        if kind == "text":
            text = _field(message, "Content")
        elif kind in MEDIA_KINDS and _field(message, "MediaId"):
            name = _field(message, "FileName") or MEDIA_NAMES[kind]
            files.append(
                PlatformFileRef(ref={"media_id": _field(message, "MediaId")}, name=name, kind=MEDIA_KINDS[kind])
            )
            # A voice message WeCom transcribed (when the app asks for it) carries the words too.
            text = _field(message, "Recognition")
        elif kind == "link":
            text = "\n".join(p for p in (_field(message, "Title"), _field(message, "Url")) if p)
        elif kind == "location":
            text = _field(message, "Label")
        if not text and not files:
            return None
        return InboundUpdate(envelope=self._envelope(message, kind, msg_id, sender, text), files=files)

    def _envelope(self, message: ET.Element, kind: str, msg_id: str, sender: str, text: str) -> dict[str, Any]:
        target = ReplyTarget(chat_id=sender)
        try:
            event_time = float(_field(message, "CreateTime"))
        except ValueError:
            event_time = time.time()
        raw = {child.tag: (child.text or "") for child in message if len(child) == 0}
        return {
            "event_id": f"wecom:{self.bot_id}:{msg_id}",
            "event_type": "message.received",
            "source_event_type": kind,
            "actor": {"actor_type": "user", "actor_id": sender, "actor_name": sender[:255]},
            "subject": {"subject_type": "message", "subject_id": msg_id, "data": {"chat_type": "private"}},
            "input": {"text": text or None},
            "data": {
                "chat_id": sender,
                "chat_type": "private",
                "agent_id": _field(message, "AgentID"),
                "reply_target": target.as_data(),
                "raw": raw,
            },
            "event_time": event_time,
        }

    # -- HTTP (platforms.adapters.wechat_api) ------------------------------------------------------
    def token_params(self) -> dict[str, str]:
        return {"corpid": self._secret("corp_id"), "corpsecret": self._secret("corp_secret")}

    def answer_is_file(self, response: httpx.Response) -> bool:
        # `media/get` names its file in Content-Disposition, whatever its type.
        return "content-disposition" in response.headers

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        media_id = str(ref.ref.get("media_id") or "")
        if not media_id:
            raise PlatformAPIError("the file reference has no media_id")
        response = await self.call("media.get", "GET", "/cgi-bin/media/get", params={"media_id": media_id})
        name = _disposition_name(response.headers.get("content-disposition", "")) or ref.name
        mime_type = ref.mime_type or response.headers.get("content-type", "").split(";")[0].strip()
        return FetchedFile(data=response.content, name=name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    def _agent_id(self) -> int:
        try:
            return int(str(self.credentials.get("agent_id") or ""))
        except ValueError:
            raise PlatformAPIError("the bot's agent_id is not a number") from None

    async def _message_send(self, target: ReplyTarget, msgtype: str, content: dict[str, Any]) -> SentMessage:
        body = {"touser": target.chat_id, "msgtype": msgtype, "agentid": self._agent_id(), msgtype: content}
        response = await self.call("message.send", "POST", "/cgi-bin/message/send", json=body)
        answer = self.json_object(response)
        if answer.get("invaliduser"):
            raise PlatformAPIError(f"WeCom message.send: {answer['invaliduser']} cannot be reached by the app")
        return SentMessage(chat_id=target.chat_id, message_id=str(answer.get("msgid") or ""))

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        return await self._message_send(target, "text", {"content": text})

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        kind = "image" if file.mime_type in IMAGE_TYPES and len(file.data) <= MAX_IMAGE_BYTES else "file"
        response = await self.call(
            "media.upload",
            "POST",
            "/cgi-bin/media/upload",
            params={"type": kind},
            files={"media": (file.name, file.data, file.mime_type or "application/octet-stream")},
        )
        media_id = str(self.json_object(response).get("media_id") or "")
        if not media_id:
            raise PlatformAPIError("WeCom media.upload: the answer carries no media_id")
        sent = await self._message_send(target, kind, {"media_id": media_id})
        if file.caption:
            await self.send_text(target, file.caption)
        return sent

    async def identity(self) -> str:
        await self.access_token()
        return f"WeCom issued an access token (gettoken) to corp {self._secret('corp_id')}"

    async def webhook_register(self, url: str) -> str:
        """WeCom takes the callback URL only on its admin console; this checks corp_id and corp_secret (by
        buying a token) and says what to paste where."""
        await self.access_token()
        return (
            f"paste {url} as the URL under the app's Receive Messages → Set API Receive, with the bot's token "
            "and EncodingAESKey, and add this server's address to the app's trusted IPs"
        )


def _plain_element(plain: bytes) -> ET.Element:
    """The decrypted text: an XML message, or (a URL check's echostr) any text, kept as an element's text."""
    if plain.lstrip().startswith(b"<"):
        return _xml(plain, "not a WeCom message")
    element = ET.Element("echostr")
    element.text = plain.decode("utf-8", "replace")
    return element


def _disposition_name(header: str) -> str:
    """The file name in `Content-Disposition: attachment; filename="..."`."""
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name.lower() == "filename" and value:
            return value.strip().strip('"')
    return ""
