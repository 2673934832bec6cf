"""QQ official bots (QQ 开放平台, the bot API v2), on httpx: the platform's webhook in, signed with Ed25519
(`X-Signature-Ed25519` over `X-Signature-Timestamp` + the raw body, with the key pair whose seed is the bot
secret repeated to 32 bytes, as QQ defines it); the callback URL's validation (op 13) answered by signing
`event_ts + plain_token` with that key; group @-messages and one-to-one (C2C) messages in; replies out
through the OpenAPI as passive replies (the message's `msg_id` and a `msg_seq` per reply), on an app access
token bought with `getAppAccessToken` and kept until shortly before it expires.

Credentials: `app_id` (AppID) and `app_secret` (AppSecret, the bot secret), both on the bot's page of the
QQ Open Platform (q.qq.com → the bot → Development → Development settings); optional `api_base_url` (one
origin for `bots.qq.com` and `api.sgroup.qq.com`, for a proxy or a test).

A group's chat is `group:<group_openid>`, a one-to-one chat `user:<user_openid>` (QQ gives bots openids,
never QQ numbers). Images in a message are fetched from the URL QQ gives. QQ cannot edit a bot's message,
so a reply is sent once, whole; a passive reply must come within QQ's window of the message (5 minutes in
a group, 60 in a one-to-one chat) and at most five times per message — later or further parts go as
active messages, which QQ allows a bot only a few of each month. GROUP_ADD_ROBOT and FRIEND_ADD are
`bot.added` and `member.joined` (docs/platform-events.md), answered passively by the event's id for 5
minutes; button interactions are not taken (they would need an acknowledgement call).
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.cache import cache

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.adapters.tokens import AccessTokens, TokenKey
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
    platform_event_envelope,
    transport_failure,
)

DEFAULT_API_BASE_URL = "https://api.sgroup.qq.com"
DEFAULT_TOKEN_BASE_URL = "https://bots.qq.com"
# QQ's opcodes: 0 an event (dispatch), 12 the answer acknowledging one, 13 the callback URL's validation.
OP_DISPATCH = 0
OP_CALLBACK_ACK = 12
OP_VALIDATION = 13
# An app access token lives `expires_in` seconds (7200); one is bought again this long before.
TOKEN_EARLY_SECONDS = 60
REQUEST_TIMEOUT = 30.0
FILE_DOWNLOAD_TIMEOUT = 60.0
# How long after a message, and how many times, QQ takes a passive reply to it.
PASSIVE_WINDOW_SECONDS = {"group": 5 * 60, "user": 60 * 60}
PASSIVE_REPLIES_MAX = 5
# What a validation's `plain_token` and `event_ts` may be. Signing them is signing on a stranger's behalf
# (the challenge is not always signed): kept to letters and digits, the signed text can never be a
# timestamp followed by a JSON body, so no answer can be replayed as a signature of an event.
PLAIN_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
EVENT_TS = re.compile(r"^[0-9]{1,20}$")
# Hosts QQ serves message attachments from (or api_base_url's host).
FILE_HOSTS = ("qq.com", "qpic.cn", "gtimg.cn")
MESSAGE_EVENTS = {"GROUP_AT_MESSAGE_CREATE": "group", "C2C_MESSAGE_CREATE": "user"}
MEMBER_EVENTS = frozenset({"GROUP_ADD_ROBOT", "FRIEND_ADD"})
# How long QQ takes a passive reply to an event (not a message) by its id.
EVENT_REPLY_SECONDS = 5 * 60
FILE_KINDS = {"image": "image", "video": "video", "voice": "audio", "audio": "audio"}

# (token origin, app_id, sha256(app_secret)) -> (token, expires at): shared by the adapters of one process.
_access_tokens = AccessTokens(early_seconds=TOKEN_EARLY_SECONDS)


def signing_key(app_secret: str) -> Ed25519PrivateKey:
    """The bot's Ed25519 key: its seed is the secret repeated until 32 bytes long, cut at 32."""
    seed = app_secret.encode()
    if not seed:
        raise ValueError("no secret")
    while len(seed) < 32:
        seed *= 2
    return Ed25519PrivateKey.from_private_bytes(seed[:32])


def _event_time(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return time.time()


class QQOfficialAdapter(PlatformAdapter):
    platform: ClassVar[str] = "qq_official"
    # QQ documents no exact limit on a text message; 2,000 characters are taken everywhere we tried.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=False,
        reaction=False,
        files_in=True,
        files_out=False,
        threads=False,
        max_message_chars=2000,
        edit_interval_seconds=1.0,
        event_types=("member.joined", "bot.added"),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("app_id", "app_secret", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "app_id",
            required=True,
            help="The bot's AppID: QQ Open Platform (q.qq.com) → the bot → Development → Development settings.",
            types=("string", "integer"),
        ),
        CredentialField(
            "app_secret",
            required=True,
            secret=True,
            help="The bot's AppSecret, on the same page (generate it once). It signs every callback and buys "
            "the access token.",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: one origin for bots.qq.com and api.sgroup.qq.com (a proxy); default QQ's own.",
        ),
    )

    _http: httpx.AsyncClient | None = None

    def _secret(self, key: str) -> str:
        return str(self.credentials.get(key) or "").strip()

    def _key(self) -> Ed25519PrivateKey:
        secret = self._secret("app_secret")
        if not secret:
            raise InboundRefusedError("forged", "the bot has no app_secret; copy it from the QQ Open Platform")
        return signing_key(secret)

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        key = self._key()
        signature = request.header("x-signature-ed25519")
        timestamp = request.header("x-signature-timestamp")
        if not signature or not timestamp:
            # Only the URL validation may come unsigned; `parse` answers it only in its narrow shape.
            if _opcode(request.body) == OP_VALIDATION:
                return
            raise InboundRefusedError("forged", "the callback carries no X-Signature-Ed25519", status=401)
        try:
            raw = bytes.fromhex(signature)
            if len(raw) != 64:
                raise ValueError("length")
            key.public_key().verify(raw, timestamp.encode() + request.body)
        except (ValueError, InvalidSignature):
            raise InboundRefusedError("forged", "the QQ signature does not match", status=401) from None

    def parse(self, request: InboundRequest) -> InboundBatch:
        payload = inbound_json_object(request.body, what="not a QQ bot callback")
        with malformed_unless_shaped("not a QQ bot callback"):
            op = payload.get("op")
            if op == OP_VALIDATION:
                return InboundBatch(response=self._validation(payload["d"]))
            if op != OP_DISPATCH or isinstance(op, bool):
                raise InboundRefusedError("malformed", "not a QQ bot callback: unknown op", status=400)
            update = self._update(payload)
        return InboundBatch(updates=[update] if update else [], response={"op": OP_CALLBACK_ACK, "d": 0})

    def _validation(self, data: dict[str, Any]) -> dict[str, Any]:
        plain_token, event_ts = data["plain_token"], data["event_ts"]
        if not isinstance(plain_token, str) or not PLAIN_TOKEN.match(plain_token):
            raise InboundRefusedError("malformed", "not a QQ validation: plain_token", status=400)
        if not isinstance(event_ts, str) or not EVENT_TS.match(event_ts):
            raise InboundRefusedError("malformed", "not a QQ validation: event_ts", status=400)
        signature = self._key().sign(f"{event_ts}{plain_token}".encode()).hex()
        return {"plain_token": plain_token, "signature": signature}

    def _update(self, payload: dict[str, Any]) -> InboundUpdate | None:
        if str(payload.get("t") or "") in MEMBER_EVENTS:
            return self._member_event(payload)
        kind = MESSAGE_EVENTS.get(str(payload.get("t") or ""))
        if kind is None:
            return None  # guild events, removals, interactions: acknowledged
        data = payload["d"]
        author = data.get("author") or {}
        message_id = str(data["id"])
        if kind == "group":
            peer = str(data.get("group_openid") or data.get("group_id") or "")
            user = str(author.get("member_openid") or author.get("id") or "")
        else:
            user = str(author.get("user_openid") or author.get("id") or "")
            peer = user
        if not peer or not user or not message_id:
            raise ValueError("no chat, sender or message id")
        text = str(data.get("content") or "").strip()
        files: list[PlatformFileRef] = []
        for item in data.get("attachments") or ():
            url = str(item.get("url") or "")
            if not url:
                continue
            mime = str(item.get("content_type") or "")
            size = item.get("size")
            major = mime.split("/", 1)[0] if "/" in mime else mime
            files.append(
                PlatformFileRef(
                    ref={"url": url if "://" in url else f"https://{url}"},
                    name=str(item.get("filename") or f"{message_id[-12:]}-{len(files)}")[:200],
                    mime_type=mime if "/" in mime else "",
                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                    kind=FILE_KINDS.get(major, "file"),
                )
            )
        if not text and not files:
            return None
        chat_id = f"{kind}:{peer}"
        event_time = _event_time(data.get("timestamp"))
        target = ReplyTarget(
            chat_id=chat_id,
            reply_to_message_id=message_id,
            extra={"passive_until": event_time + PASSIVE_WINDOW_SECONDS[kind]},
        )
        chat_type = "group" if kind == "group" else "private"
        return InboundUpdate(
            envelope={
                "event_id": f"qq_official:{self.bot_id}:{message_id}",
                "event_type": "message.received",
                "source_event_type": str(payload["t"]),
                "actor": {"actor_type": "user", "actor_id": user, "actor_name": user[:255]},
                "subject": {"subject_type": "message", "subject_id": message_id, "data": {"chat_type": chat_type}},
                "input": {"text": text or None},
                "data": {
                    "chat_id": chat_id,
                    "chat_type": chat_type,
                    # QQ pushes a group's messages to the bot only when they @ it.
                    "mentioned": True,
                    "reply_target": target.as_data(),
                    "raw": payload,
                },
                "event_time": event_time,
            },
            files=files,
        )

    def _member_event(self, payload: dict[str, Any]) -> InboundUpdate | None:
        """GROUP_ADD_ROBOT (the bot added to a group: `bot.added`, its adder the actor) and FRIEND_ADD (a
        user adding the bot: `member.joined` in their one-to-one chat), docs/platform-events.md. QQ takes a
        passive reply to such an event by its id for 5 minutes, as to a message."""
        data = payload["d"]
        delivery = str(payload.get("id") or "")
        if payload["t"] == "GROUP_ADD_ROBOT":
            peer, actor, kind, event_type = (
                str(data.get("group_openid") or ""),
                data.get("op_member_openid"),
                "group",
                "bot.added",
            )
        else:
            peer = str(data.get("openid") or "")
            actor, kind, event_type = peer, "user", "member.joined"
        if not peer or not delivery:
            return None
        chat_id = f"{kind}:{peer}"
        target = ReplyTarget(
            chat_id=chat_id, extra={"event_id": delivery, "passive_until": time.time() + EVENT_REPLY_SECONDS}
        )
        envelope = platform_event_envelope(
            event_id=f"qq_official:{self.bot_id}:{delivery}",
            event_type=event_type,
            source_event_type=str(payload["t"]),
            chat_id=chat_id,
            chat_type="group" if kind == "group" else "private",
            actor_id=str(actor) if actor else None,
            reply_target=target,
            raw=payload,
        )
        return InboundUpdate(envelope=envelope)

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
            raise PlatformAPIError(f"QQ {what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"QQ {what}: {exc}", exc) from exc

    def _token_key(self) -> TokenKey:
        origin = self.api_base_url or DEFAULT_TOKEN_BASE_URL
        return AccessTokens.key(origin, self._secret("app_id"), self._secret("app_secret"))

    async def access_token(self) -> str:
        """The app access token (`POST /app/getAppAccessToken`), kept until shortly before it expires."""
        key = self._token_key()
        if (cached := _access_tokens.get(key)) is not None:
            return cached
        if not key[1] or not self._secret("app_secret"):
            raise PlatformAPIError("the bot has no QQ app_id or app_secret")
        base = self.api_base_url or DEFAULT_TOKEN_BASE_URL
        response = await self._request(
            "getAppAccessToken",
            "POST",
            f"{base}/app/getAppAccessToken",
            json={"appId": key[1], "clientSecret": self._secret("app_secret")},
        )
        body = _json_or_none(response)
        if response.status_code >= 400 or not isinstance(body, dict) or not body.get("access_token"):
            _raise_for("getAppAccessToken", response, body, writes=False)
        assert isinstance(body, dict)
        try:
            expires = float(body.get("expires_in") or 7200)  # QQ sends it as a string
        except (TypeError, ValueError):
            expires = 7200.0
        token = str(body["access_token"])
        _access_tokens.put(key, token, expires)
        return token

    async def openapi(self, what: str, method: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """One OpenAPI call (`Authorization: QQBot <token>`); a token QQ refuses (401) is bought again once."""
        base = self.api_base_url or DEFAULT_API_BASE_URL
        for attempt in (1, 2):
            token = await self.access_token()
            headers = {"Authorization": f"QQBot {token}", "X-Union-Appid": self._secret("app_id")}
            response = await self._request(what, method, f"{base}{path}", json=payload, headers=headers)
            body = _json_or_none(response)
            if response.status_code == 401 and attempt == 1:
                _access_tokens.drop(self._token_key())
                continue
            if response.status_code >= 400:
                _raise_for(what, response, body, writes=method == "POST")
            return body if isinstance(body, dict) else {}
        raise PlatformAPIError(f"QQ {what}: the access token is refused")  # pragma: no cover

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        url = str(ref.ref.get("url") or "")
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        own = urlsplit(self.api_base_url).hostname if self.api_base_url else None
        qq_host = any(host == h or host.endswith(f".{h}") for h in FILE_HOSTS)
        if parts.scheme not in ("http", "https") or not (qq_host or (own and host == own)):
            raise PlatformAPIError("the attachment is not on a QQ host")
        response = await self._request("attachment", "GET", url, timeout=FILE_DOWNLOAD_TIMEOUT)
        if response.status_code != 200:
            raise PlatformAPIError(
                f"QQ did not give the attachment (HTTP {response.status_code})", retryable=response.status_code >= 500
            )
        mime_type = response.headers.get("content-type", "").split(";")[0].strip() or ref.mime_type
        return FetchedFile(data=response.content, name=ref.name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    async def _passive_seq(self, target: ReplyTarget) -> int | None:
        """The `msg_seq` of this reply to the message (1, 2, ...: QQ refuses one used before), or None when
        QQ would no longer take a passive reply to it (too late, or five already sent)."""
        until = target.extra.get("passive_until")
        replied = target.reply_to_message_id or str(target.extra.get("event_id") or "")
        if not replied or not isinstance(until, int | float) or time.time() >= until:
            return None
        digest = hashlib.sha256(f"{self.bot_id}\0{replied}".encode()).hexdigest()[:32]
        key = f"platforms:qq_official:seq:{digest}"
        ttl = int(max(PASSIVE_WINDOW_SECONDS.values()) * 2)
        await cache.aadd(key, 0, timeout=ttl)  # the cache is shared by the workers: each reply its own number
        seq = int(await cache.aincr(key))
        return seq if seq <= PASSIVE_REPLIES_MAX else None

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        kind, _, peer = target.chat_id.partition(":")
        if kind not in ("group", "user") or not peer or "/" in peer:
            raise PlatformAPIError(f"not a QQ chat: {target.chat_id!r} (group:<openid> or user:<openid>)")
        payload: dict[str, Any] = {"content": text, "msg_type": 0}
        seq = await self._passive_seq(target)
        if seq is not None and target.reply_to_message_id:
            payload.update(msg_id=target.reply_to_message_id, msg_seq=seq)
        elif seq is not None:
            payload.update(event_id=str(target.extra["event_id"]), msg_seq=seq)
        path = f"/v2/groups/{peer}/messages" if kind == "group" else f"/v2/users/{peer}/messages"
        sent = await self.openapi("send message", "POST", path, payload)
        return SentMessage(chat_id=target.chat_id, message_id=str(sent.get("id") or ""))

    async def identity(self) -> str:
        await self.access_token()
        return f"QQ gave an access token to AppID {self._secret('app_id')} (getAppAccessToken)"

    async def webhook_register(self, url: str) -> str:
        await self.access_token()  # checks app_id and app_secret
        return (
            f"the credentials work; on the QQ Open Platform (the bot → Development → Callback settings) paste {url} "
            "as the callback address and add the events GROUP_AT_MESSAGE_CREATE and C2C_MESSAGE_CREATE (and "
            "GROUP_ADD_ROBOT and FRIEND_ADD for bot.added and member.joined)"
        )


def _opcode(body: bytes) -> Any:
    """The `op` of a body, if it is a JSON object (the full read, with its refusals, is `parse`'s)."""
    try:
        return inbound_json_object(body, what="").get("op")
    except InboundRefusedError:
        return None


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _raise_for(what: str, response: httpx.Response, body: Any, *, writes: bool) -> None:
    status = response.status_code
    detail = ""
    if isinstance(body, dict):
        detail = f"{body.get('code') or body.get('err_code') or ''} {body.get('message') or ''}".strip()[:200]
    if status == 429:
        raise PlatformAPIError(f"QQ {what}: rate limited {detail}".strip(), retry_after=1.0)
    raise PlatformAPIError(
        f"QQ {what}: HTTP {status} {detail}".strip(),
        retryable=status >= 500,
        outcome_unknown=status >= 500 and writes,
    )
