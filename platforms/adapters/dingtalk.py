"""DingTalk (钉钉) robots of an internal app, on httpx: the robot's HTTP callback in (the `timestamp` and
`sign` headers checked: Base64 of HMAC-SHA256 over `timestamp + "\\n" + client_secret`, keyed with the
client secret, within an hour of the server's clock, as DingTalk defines it), replies out to the message's
`sessionWebhook` while it lives and through the robot OpenAPI after (`robot/groupMessages/send`,
`robot/oToMessages/batchSend`, with an access token bought with the app's client id and secret and kept
until shortly before it expires). Pictures, files, audio and video in are fetched with
`robot/messageFiles/download`; files out are uploaded with `media/upload` and sent as `sampleFile` /
`sampleImageMsg`. DingTalk robots cannot edit a plain message, so a reply is sent once, whole — unless
the bot names an AI card template (`card_template_id`): then a reply is an AI card, created and delivered
with `card/instances/createAndDeliver` and streamed with `PUT card/streaming` (the whole text each time,
`isFull`), the last update marked `isFinalize` once the run's reply is whole (`reply_finished`); such a bot's
capabilities say `edit`.

Two ways in, chosen by the credential `mode`: `callback` (the default: DingTalk posts each message to the
webhook below) or `stream` (no public URL: the connector process holds DingTalk's Stream-mode connection,
`platforms.adapters.dingtalk_stream`, and hands each message to the same `update_of` as the callback, so
deduplication, files and replies are the same). Card clicks (`/v1.0/card/instances/callback`) arrive over
the stream only and become `card.clicked` events.

Credentials: `client_id` (the app's Client ID, once AppKey) and `client_secret` (Client Secret, once
AppSecret), both on the app's "Credentials and basic information" page of the DingTalk developer console;
optional `mode` (`callback` or `stream`), optional `card_template_id` (an AI card template of the
DingTalk card platform, with a streaming text variable named by `card_content_key`, default `content`),
optional `api_base_url` (the OpenAPI's origin, default `https://api.dingtalk.com`; when set it also serves
`media/upload`, which otherwise goes to `https://oapi.dingtalk.com`, and may receive session webhooks).

In one-to-one chats the robot answers everything; in groups DingTalk only pushes the messages that @ the
robot, and the answer @s the sender. The chat of a one-to-one conversation is `user:<staffId>` (so a reply
made later, with no session webhook, knows whom to write to); a group's is its `conversationId`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar, NoReturn
from urllib.parse import urlsplit

import httpx

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.adapters.tokens import AccessTokens, TokenKey
from platforms.interface import (
    CredentialField,
    FetchedFile,
    InboundBatch,
    InboundRefusedError,
    InboundRequest,
    InboundUpdate,
    OutboundFile,
    PlatformAdapter,
    PlatformAPIError,
    PlatformCapabilities,
    PlatformConnector,
    PlatformFileRef,
    ReplyTarget,
    SentMessage,
    inbound_json_object,
    malformed_unless_shaped,
    transport_failure,
)

DEFAULT_API_BASE_URL = "https://api.dingtalk.com"
DEFAULT_OAPI_BASE_URL = "https://oapi.dingtalk.com"
# DingTalk refuses a callback whose timestamp is more than an hour from the receiver's clock.
REPLAY_WINDOW_SECONDS = 60 * 60
# An access token lives two hours; one is bought again this long before it expires, and a session
# webhook is not used this close to its expiry (the reply goes through the OpenAPI instead).
TOKEN_EARLY_SECONDS = 300
SESSION_EARLY_SECONDS = 30
REQUEST_TIMEOUT = 30.0
GROUP = "2"
# The session webhooks DingTalk hands out live on its own hosts (or on api_base_url's, a proxy or a fake).
SESSION_HOSTS = ("dingtalk.com",)
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/bmp"})
MAX_IMAGE_BYTES = 20 * 1024 * 1024
# HTTP 401/403, or these codes in the body, say the token is stale: it is bought again once.
TOKEN_INVALID_CODES = frozenset({"InvalidAuthentication", "Forbidden.AccessDenied.AccessTokenPermissionDenied"})
OAPI_TOKEN_INVALID = frozenset({40014, 42001, 88})
FILE_KINDS = {"picture": "image", "file": "file", "audio": "audio", "video": "video"}
MODES = ("callback", "stream")
DEFAULT_CARD_CONTENT_KEY = "content"
# An AI card takes its streaming updates about as fast as a person reads; one a second keeps well under
# DingTalk's per-app limit on `card/streaming` even with several replies at once.
CARD_EDIT_INTERVAL_SECONDS = 1.0

# (api base, client_id, sha256(client_secret)) -> (token, expires at): shared by the adapters of one process.
_access_tokens = AccessTokens(early_seconds=TOKEN_EARLY_SECONDS)


def callback_sign(timestamp: str, secret: str) -> str:
    """The `sign` header DingTalk sends with a callback: Base64 of HMAC-SHA256(secret, timestamp\\nsecret)."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _title(text: str) -> str:
    """A markdown message's title (the line a notification shows): the text's first line, short."""
    first = next((line.strip("#>*- \t") for line in text.splitlines() if line.strip()), "")
    return (first[:40] or "reply").strip()


class DingTalkAdapter(PlatformAdapter):
    platform: ClassVar[str] = "dingtalk"
    # DingTalk documents 20,000 bytes for a robot's markdown text and about 20 messages a minute per group;
    # 5,000 characters stay under the bytes even in CJK (3 bytes each), and one write every 3 s under the pace.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=False,
        reaction=False,
        files_in=True,
        files_out=True,
        threads=False,
        max_message_chars=5000,
        edit_interval_seconds=3.0,
        max_file_bytes=20 * 1024 * 1024,
        event_types=("card.clicked",),
    )
    credential_keys: ClassVar[tuple[str, ...]] = (
        "client_id",
        "client_secret",
        "mode",
        "card_template_id",
        "card_content_key",
        "api_base_url",
    )
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "client_id",
            required=True,
            help="The app's Client ID (once AppKey): DingTalk developer console → the app → Credentials "
            "and basic information. It is also the robot's robotCode.",
            link="https://open-dev.dingtalk.com/",
        ),
        CredentialField(
            "client_secret",
            required=True,
            secret=True,
            help="The app's Client Secret (once AppSecret), on the same page. It signs every callback "
            "and buys the access token.",
            link="https://open-dev.dingtalk.com/",
        ),
        CredentialField(
            "mode",
            help="Optional: how messages come in. callback (the default): DingTalk posts them to this bot's "
            "webhook (the robot's HTTP mode). stream: the host holds DingTalk's Stream-mode connection, no "
            "public URL needed (developer console → the app → Robot → message receiving mode: Stream).",
            pattern="^(callback|stream)$",
            pattern_hint="callback or stream",
            link="https://open-dev.dingtalk.com/",
        ),
        CredentialField(
            "card_template_id",
            help="Optional: an AI card template's id (DingTalk card platform → the template → Template ID). "
            "When set, replies stream into an AI card; the app needs the Card.Instance.Write and "
            "Card.Streaming.Write permissions.",
            link="https://open-dev.dingtalk.com/fe/card",
        ),
        CredentialField(
            "card_content_key",
            help="Optional: the template's streaming text variable (default content).",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: the OpenAPI's origin (default https://api.dingtalk.com), for a proxy.",
        ),
    )
    connector_class: ClassVar[type[PlatformConnector] | None] = None  # set below: DingTalkStreamConnector

    _http: httpx.AsyncClient | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The last text each open AI card shows (out track id -> text): `reply_finished` repeats it with
        # the finish flag. Per adapter, which the delivery keeps per bot.
        self._cards: dict[str, str] = {}
        self.capabilities = type(self).capabilities_for(self.credentials)  # type: ignore[misc]

    @classmethod
    def capabilities_for(cls, credentials: Mapping[str, Any]) -> PlatformCapabilities:
        """With a card template, a reply is an AI card edited as it streams (and runners are told so)."""
        if str(credentials.get("card_template_id") or "").strip():
            return replace(cls.capabilities, edit=True, edit_interval_seconds=CARD_EDIT_INTERVAL_SECONDS)
        return cls.capabilities

    @property
    def mode(self) -> str:
        value = str(self.credentials.get("mode") or "callback").strip().lower()
        return value if value in MODES else "callback"

    @property
    def card_template_id(self) -> str:
        return str(self.credentials.get("card_template_id") or "").strip()

    @property
    def card_content_key(self) -> str:
        return str(self.credentials.get("card_content_key") or "").strip() or DEFAULT_CARD_CONTENT_KEY

    def _secret(self, key: str) -> str:
        return str(self.credentials.get(key) or "")

    @property
    def base_url(self) -> str:
        return self.api_base_url or DEFAULT_API_BASE_URL

    @property
    def oapi_base_url(self) -> str:
        return self.api_base_url or DEFAULT_OAPI_BASE_URL

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        secret = self._secret("client_secret")
        if not secret:
            raise InboundRefusedError("forged", "the bot has no client_secret; copy it from the app's page")
        timestamp = request.header("timestamp")
        sign = request.header("sign")
        if not timestamp or not sign:
            raise InboundRefusedError("forged", "the callback is not signed by DingTalk", status=401)
        if not hmac.compare_digest(sign.encode(), callback_sign(timestamp, secret).encode()):
            raise InboundRefusedError("forged", "the DingTalk signature does not match", status=401)
        try:
            age = abs(time.time() - int(timestamp) / 1000)
        except (ValueError, OverflowError):
            raise InboundRefusedError("forged", "the callback timestamp is not a number", status=401) from None
        if age > REPLAY_WINDOW_SECONDS:
            raise InboundRefusedError("replayed", "the callback was signed more than an hour ago", status=401)

    def parse(self, request: InboundRequest) -> InboundBatch:
        payload = inbound_json_object(request.body, what="not a DingTalk robot message")
        with malformed_unless_shaped("not a DingTalk robot message"):
            return self._batch(payload)

    def _batch(self, payload: dict[str, Any]) -> InboundBatch:
        update = self.update_of(payload)
        return InboundBatch(updates=[update] if update is not None else [])

    def update_of(self, payload: dict[str, Any]) -> InboundUpdate | None:
        """The update a robot message makes (the callback's body, or a Stream-mode push's data), or None
        for one nobody answers (the robot's own, an empty one)."""
        if not payload.get("msgId") or not payload.get("conversationId"):
            raise InboundRefusedError("malformed", "a robot message without msgId or conversationId", status=400)
        if payload.get("senderId") and payload.get("senderId") == payload.get("chatbotUserId"):
            return None
        text, files = self._content(payload)
        if not text and not files:
            return None
        return InboundUpdate(envelope=self._envelope(payload, text), files=files)

    def _content(self, payload: dict[str, Any]) -> tuple[str, list[PlatformFileRef]]:
        kind = str(payload.get("msgtype") or "")
        given = payload.get("content")
        content: dict[str, Any] = given if isinstance(given, dict) else {}
        robot = str(payload.get("robotCode") or self._secret("client_id"))
        files: list[PlatformFileRef] = []

        def add(code: Any, kind_of: str, name: str) -> None:
            if code:
                ref = {"download_code": str(code), "robot_code": robot}
                files.append(PlatformFileRef(ref=ref, name=name, kind=FILE_KINDS.get(kind_of, "file")))

        if kind == "text":
            return str((payload.get("text") or {}).get("content") or "").strip(), files
        if kind == "picture":
            add(content.get("downloadCode") or content.get("pictureDownloadCode"), "picture", "picture.jpg")
            return "", files
        if kind in ("file", "video"):
            add(content.get("downloadCode"), kind, str(content.get("fileName") or f"{kind}-{payload['msgId']}"))
            return "", files
        if kind == "audio":
            # DingTalk transcribes voice messages itself; the runner gets the words and the recording.
            add(content.get("downloadCode"), "audio", f"audio-{payload['msgId']}.amr")
            return str(content.get("recognition") or "").strip(), files
        if kind == "richText":
            pieces: list[str] = []
            for index, item in enumerate(content.get("richText") or ()):
                if not isinstance(item, dict):
                    continue
                if item.get("text"):
                    pieces.append(str(item["text"]))
                elif item.get("type") == "picture" or item.get("downloadCode"):
                    add(item.get("downloadCode") or item.get("pictureDownloadCode"), "picture", f"picture-{index}.jpg")
            return "".join(pieces).strip(), files
        return "", files

    def _envelope(self, payload: dict[str, Any], text: str) -> dict[str, Any]:
        in_group = str(payload.get("conversationType") or "") == GROUP
        staff = str(payload.get("senderStaffId") or "")
        chat_id = str(payload["conversationId"]) if in_group or not staff else f"user:{staff}"
        extra: dict[str, Any] = {
            "conversation_type": "group" if in_group else "single",
            "conversation_id": str(payload["conversationId"]),
            "robot_code": str(payload.get("robotCode") or self._secret("client_id")),
        }
        if staff:
            extra["sender_staff_id"] = staff
        if payload.get("sessionWebhook"):
            extra["session_webhook"] = str(payload["sessionWebhook"])
            extra["session_webhook_expires_ms"] = int(payload.get("sessionWebhookExpiredTime") or 0)
        target = ReplyTarget(chat_id=chat_id, extra=extra)
        try:
            event_time = int(payload.get("createAt") or 0) / 1000 or time.time()
        except (ValueError, TypeError):
            event_time = time.time()
        # The session webhook lets anyone holding it post into the chat until it expires: it stays in the
        # reply target (where the delivery needs it), not in the raw copy runners read.
        raw = {k: v for k, v in payload.items() if k not in ("sessionWebhook", "sessionWebhookExpiredTime")}
        return {
            "event_id": f"dingtalk:{self.bot_id}:{payload['msgId']}",
            "event_type": "message.received",
            "source_event_type": f"chatbot.{payload.get('msgtype') or 'message'}",
            "actor": {
                "actor_type": "user",
                "actor_id": staff or str(payload.get("senderId") or ""),
                "actor_name": str(payload.get("senderNick") or staff)[:255],
                "metadata": {k: v for k, v in {"sender_id": payload.get("senderId")}.items() if v},
            },
            "subject": {
                "subject_type": "message",
                "subject_id": str(payload["msgId"]),
                "data": {
                    "chat_type": "group" if in_group else "private",
                    **({"chat_title": str(payload["conversationTitle"])} if payload.get("conversationTitle") else {}),
                },
            },
            "input": {"text": text or None},
            "data": {
                "chat_id": chat_id,
                "chat_type": "group" if in_group else "private",
                "reply_target": target.as_data(),
                "raw": raw,
            },
            "event_time": event_time,
        }

    # -- HTTP -----------------------------------------------------------------------------------
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            if not self._secret("client_id") or not self._secret("client_secret"):
                raise PlatformAPIError("the bot has no DingTalk client_id / client_secret")
            # Through the outbound address guard; no proxy from the environment.
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

    async def _send_raw(self, what: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.http().request(method, url, **kwargs)
        except AddressRefusedError as exc:  # the outbound guard refused the address: retrying cannot help
            raise PlatformAPIError(f"DingTalk {what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"DingTalk {what}: {exc}", exc) from exc

    @staticmethod
    def _raise_for(what: str, response: httpx.Response, body: Any, *, writes: bool) -> NoReturn:
        """A non-2xx answer of the OpenAPI (`{"code", "message"}`) as `PlatformAPIError`."""
        status = response.status_code
        detail = body.get("message") or body.get("code") if isinstance(body, dict) else response.text[:200]
        message = f"DingTalk {what}: HTTP {status} {str(detail)[:200]}"
        if status == 429 or (isinstance(body, dict) and str(body.get("code") or "").startswith("Throttling")):
            raise PlatformAPIError(message, retry_after=_retry_after(response))
        # A 5xx does not say whether a write was carried out.
        raise PlatformAPIError(message, retryable=status >= 500, outcome_unknown=writes and status >= 500)

    def _token_key(self) -> TokenKey:
        return AccessTokens.key(self.base_url, self._secret("client_id"), self._secret("client_secret"))

    async def access_token(self) -> str:
        """The app's access token (`POST /v1.0/oauth2/accessToken`), kept until shortly before it expires."""
        key = self._token_key()
        if (cached := _access_tokens.get(key)) is not None:
            return cached
        response = await self._send_raw(
            "accessToken",
            "POST",
            f"{self.base_url}/v1.0/oauth2/accessToken",
            json={"appKey": self._secret("client_id"), "appSecret": self._secret("client_secret")},
        )
        body = _json_or_none(response)
        if response.status_code >= 400 or not isinstance(body, dict) or not body.get("accessToken"):
            self._raise_for("accessToken", response, body, writes=False)
        assert isinstance(body, dict)
        token = str(body["accessToken"])
        _access_tokens.put(key, token, float(body.get("expireIn") or 7200))
        return token

    async def openapi(
        self, what: str, path: str, payload: dict[str, Any], *, writes: bool = True, method: str = "POST"
    ) -> dict[str, Any]:
        """One OpenAPI call with the app's token (`x-acs-dingtalk-access-token`); a token DingTalk no
        longer takes is bought again once."""
        for attempt in (1, 2):
            token = await self.access_token()
            response = await self._send_raw(
                what, method, f"{self.base_url}{path}", json=payload, headers={"x-acs-dingtalk-access-token": token}
            )
            body = _json_or_none(response)
            stale = response.status_code in (401, 403) or (
                isinstance(body, dict) and str(body.get("code") or "") in TOKEN_INVALID_CODES
            )
            if stale and attempt == 1:
                _access_tokens.drop(self._token_key())
                continue
            if response.status_code >= 400:
                self._raise_for(what, response, body, writes=writes)
            return body if isinstance(body, dict) else {}
        raise PlatformAPIError(f"DingTalk {what}: the access token is refused")  # pragma: no cover

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        code = str(ref.ref.get("download_code") or "")
        if not code:
            raise PlatformAPIError("the file reference has no download_code")
        robot = str(ref.ref.get("robot_code") or self._secret("client_id"))
        found = await self.openapi(
            "messageFiles.download",
            "/v1.0/robot/messageFiles/download",
            {"downloadCode": code, "robotCode": robot},
            writes=False,
        )
        url = str(found.get("downloadUrl") or "")
        if not url.startswith(("https://", "http://")):
            raise PlatformAPIError("DingTalk messageFiles.download: the answer carries no downloadUrl")
        response = await self._send_raw("file download", "GET", url)
        if response.status_code != 200:
            raise PlatformAPIError(
                f"DingTalk did not give the file (HTTP {response.status_code})", retryable=response.status_code >= 500
            )
        mime_type = ref.mime_type or response.headers.get("content-type", "").split(";")[0].strip()
        return FetchedFile(data=response.content, name=ref.name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    def _session_webhook(self, target: ReplyTarget) -> str | None:
        """The message's session webhook while it lives (and on a host it may be on), else None."""
        url = str(target.extra.get("session_webhook") or "")
        expires_ms = target.extra.get("session_webhook_expires_ms")
        if not url or not isinstance(expires_ms, int) or expires_ms / 1000 - SESSION_EARLY_SECONDS <= time.time():
            return None
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        own = self.api_base_url and host == (urlsplit(self.api_base_url).hostname or "").lower()
        official = parts.scheme == "https" and any(host == h or host.endswith(f".{h}") for h in SESSION_HOSTS)
        return url if own or official else None

    async def _session_send(self, url: str, body: dict[str, Any]) -> None:
        response = await self._send_raw("sessionWebhook", "POST", url, json=body)
        answer = _json_or_none(response)
        if response.status_code >= 400:
            self._raise_for("sessionWebhook", response, answer, writes=True)
        if isinstance(answer, dict) and int(answer.get("errcode") or 0) != 0:
            code = int(answer.get("errcode") or 0)
            message = f"DingTalk sessionWebhook: {answer.get('errmsg') or 'error'} (errcode {code})"
            if code == 130101:  # sending too fast
                raise PlatformAPIError(message, retry_after=3.0)
            raise PlatformAPIError(message)

    async def _robot_send(self, target: ReplyTarget, msg_key: str, params: dict[str, Any]) -> str:
        robot = str(target.extra.get("robot_code") or self._secret("client_id"))
        body: dict[str, Any] = {
            "robotCode": robot,
            "msgKey": msg_key,
            "msgParam": json.dumps(params, ensure_ascii=False),
        }
        if target.chat_id.startswith("user:"):
            body["userIds"] = [target.chat_id.removeprefix("user:")]
            answer = await self.openapi("oToMessages.batchSend", "/v1.0/robot/oToMessages/batchSend", body)
        else:
            body["openConversationId"] = str(target.extra.get("conversation_id") or target.chat_id)
            answer = await self.openapi("groupMessages.send", "/v1.0/robot/groupMessages/send", body)
        return str(answer.get("processQueryKey") or "")

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        if self.card_template_id:
            return await self._card_send(target, text)
        in_group = target.extra.get("conversation_type") == "group"
        staff = str(target.extra.get("sender_staff_id") or "")
        session = self._session_webhook(target)
        if session is not None:
            # In a group the answer @s whoever asked (the @ must be in the text as well as in `at`).
            mention = in_group and staff
            body: dict[str, Any] = {
                "msgtype": "markdown",
                "markdown": {"title": _title(text), "text": f"@{staff} {text}" if mention else text},
            }
            if mention:
                body["at"] = {"atUserIds": [staff]}
            await self._session_send(session, body)
            return SentMessage(chat_id=target.chat_id, message_id="")
        key = await self._robot_send(target, "sampleMarkdown", {"title": _title(text), "text": text})
        return SentMessage(chat_id=target.chat_id, message_id=key)

    # -- AI cards -------------------------------------------------------------------------------
    def _open_space(self, target: ReplyTarget) -> tuple[str, dict[str, Any]]:
        """The card's open space (`dtv1.card//IM_GROUP.<conversation>` or `IM_ROBOT.<staff id>`) and its
        delivery model."""
        robot = str(target.extra.get("robot_code") or self._secret("client_id"))
        if target.chat_id.startswith("user:"):
            space = f"dtv1.card//IM_ROBOT.{target.chat_id.removeprefix('user:')}"
            return space, {"imRobotOpenDeliverModel": {"spaceType": "IM_ROBOT", "robotCode": robot}}
        conversation = str(target.extra.get("conversation_id") or target.chat_id)
        return f"dtv1.card//IM_GROUP.{conversation}", {"imGroupOpenDeliverModel": {"robotCode": robot}}

    async def _card_send(self, target: ReplyTarget, text: str) -> SentMessage:
        out_track_id = f"lbh-{uuid.uuid4().hex}"
        space, deliver = self._open_space(target)
        await self.openapi(
            "card.createAndDeliver",
            "/v1.0/card/instances/createAndDeliver",
            {
                "cardTemplateId": self.card_template_id,
                "outTrackId": out_track_id,
                "callbackType": "STREAM",
                "cardData": {"cardParamMap": {self.card_content_key: ""}},
                "openSpaceId": space,
                "imGroupOpenSpaceModel": {"supportForward": True},
                "imRobotOpenSpaceModel": {"supportForward": True},
                "userIdType": 1,
                **deliver,
            },
        )
        self._cards[out_track_id] = ""
        message = SentMessage(chat_id=target.chat_id, message_id=out_track_id)
        await self._card_stream(message, text, finished=False)
        return message

    async def _card_stream(self, message: SentMessage, text: str, *, finished: bool, failed: bool = False) -> None:
        await self.openapi(
            "card.streaming",
            "/v1.0/card/streaming",
            {
                "outTrackId": message.message_id,
                "guid": uuid.uuid4().hex,
                "key": self.card_content_key,
                "content": text,
                "isFull": True,
                "isFinalize": finished,
                "isError": failed,
            },
            method="PUT",
        )
        if finished:
            self._cards.pop(message.message_id, None)
        else:
            self._cards[message.message_id] = text

    async def edit_text(self, message: SentMessage, text: str) -> None:
        if not self.card_template_id or not message.message_id.startswith("lbh-"):
            raise PlatformAPIError("DingTalk messages cannot be edited (only AI cards)")
        await self._card_stream(message, text, finished=False)

    async def reply_finished(self, target: ReplyTarget, sent: list[SentMessage], *, failed: bool) -> None:
        """Each card of the reply gets its last text once more, marked final (a card left unfinalised
        keeps showing its typing state)."""
        for message in sent:
            if message.message_id in self._cards:
                text = self._cards[message.message_id]
                await self._card_stream(message, text, finished=True, failed=failed and not text)

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        image = file.mime_type in IMAGE_TYPES and len(file.data) <= MAX_IMAGE_BYTES
        media_id = await self._upload(file, "image" if image else "file")
        if image:
            key = await self._robot_send(target, "sampleImageMsg", {"photoURL": media_id})
        else:
            extension = file.name.rsplit(".", 1)[-1].lower() if "." in file.name else "file"
            params = {"mediaId": media_id, "fileName": file.name, "fileType": extension}
            key = await self._robot_send(target, "sampleFile", params)
        if file.caption:
            await self.send_text(target, file.caption)
        return SentMessage(chat_id=target.chat_id, message_id=key)

    async def _upload(self, file: OutboundFile, kind: str) -> str:
        """`media/upload` on the older API host (the same app token), the media id."""
        for attempt in (1, 2):
            token = await self.access_token()
            response = await self._send_raw(
                "media.upload",
                "POST",
                f"{self.oapi_base_url}/media/upload",
                params={"access_token": token, "type": kind},
                files={"media": (file.name, file.data, file.mime_type or "application/octet-stream")},
            )
            body = _json_or_none(response)
            code = int(body.get("errcode") or 0) if isinstance(body, dict) else -1
            if code in OAPI_TOKEN_INVALID and attempt == 1:
                _access_tokens.drop(self._token_key())
                continue
            if response.status_code >= 400:
                self._raise_for("media.upload", response, body, writes=False)
            if not isinstance(body, dict) or code != 0 or not body.get("media_id"):
                detail = body.get("errmsg") if isinstance(body, dict) else response.text[:200]
                raise PlatformAPIError(f"DingTalk media.upload: {detail} (errcode {code})")
            return str(body["media_id"])
        raise PlatformAPIError("DingTalk media.upload: the access token is refused")  # pragma: no cover

    async def identity(self) -> str:
        await self.access_token()
        return f"DingTalk issued an access token to the app {self._secret('client_id')}"

    async def webhook_register(self, url: str) -> str:
        """DingTalk takes the message receiving address only on the developer console; this checks the
        credentials (by buying a token) and says what to paste where."""
        await self.access_token()
        if self.mode == "stream":
            return (
                "the bot is in Stream mode: the connector process holds its connection, no URL is needed; "
                "choose Stream as the robot's message receiving mode (developer console → the app → Robot)"
            )
        return (
            f"paste {url} as the message receiving address of the app's robot (developer console → the app → "
            "Robot → HTTP mode) and publish the app"
        )


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after") or 1.0))
    except ValueError:
        return 1.0


from platforms.adapters.dingtalk_stream import DingTalkStreamConnector  # noqa: E402 (it imports this module's names)

DingTalkAdapter.connector_class = DingTalkStreamConnector
