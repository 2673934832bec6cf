"""LINE Messaging API bots, on httpx (LINE's SDK takes no HTTP transport, so its connections could not go
through the outbound address guard): webhook events in, checked by `X-Line-Signature` (HMAC-SHA256 of the
raw body with the channel secret, Base64); replies out with the event's reply token while it is fresh and
unused (free of LINE's monthly message quota), else by push (`/v2/bot/message/push`, with an
`X-Line-Retry-Key` so LINE itself refuses a second copy of one push); images, videos, audio and files in
through the content endpoint (`api-data.line.me`).

Credentials: `channel_secret` and `channel_access_token` (LINE Developers console → the provider → the
Messaging API channel: Basic settings → Channel secret; Messaging API → Channel access token, long-lived),
optional `api_base_url` (one origin for both API hosts, for a proxy or a test).

Text, image, video, audio and file messages become events; in a group or room a message says whether it
mentions the bot (`data.mentioned`, for the binding's group rules). Follow / unfollow, join, memberJoined /
memberLeft, postback and unsend are events of their own (docs/platform-events.md); leave, beacons and the
rest are acknowledged. LINE messages cannot be edited, and a bot's images go out only as public
HTTPS URLs, so a run's files are not sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from typing import Any, ClassVar

import httpx
from django.core.cache import cache

from foundation.outbound import AddressRefusedError, guarded_async_transport
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

DEFAULT_API_BASE_URL = "https://api.line.me"
DEFAULT_DATA_BASE_URL = "https://api-data.line.me"
# LINE says a reply token is valid for a short while only (and for one reply); a reply later than this
# after the event goes by push instead of failing.
REPLY_TOKEN_SECONDS = 50.0
REQUEST_TIMEOUT = 30.0
FILE_KINDS = {"image": "image", "video": "video", "audio": "audio", "file": "file"}
FILE_NAMES = {"image": "image.jpg", "video": "video.mp4", "audio": "audio.m4a", "file": "file"}
GROUP_SOURCES = frozenset({"group", "room"})


class LineAdapter(PlatformAdapter):
    platform: ClassVar[str] = "line"
    # A text message holds 5,000 characters (counted in UTF-16 code units, as LINE's servers count them).
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=False,
        reaction=False,
        files_in=True,
        files_out=False,
        threads=False,
        max_message_chars=5000,
        edit_interval_seconds=0.5,
        event_types=("member.joined", "member.left", "message.recalled", "card.clicked", "bot.added"),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("channel_secret", "channel_access_token", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "channel_secret",
            required=True,
            secret=True,
            help="The channel secret: LINE Developers console → the Messaging API channel → Basic settings.",
            link="https://developers.line.biz/console/",
        ),
        CredentialField(
            "channel_access_token",
            required=True,
            secret=True,
            help="A long-lived channel access token: the channel → Messaging API tab → Channel access token (issue).",
            link="https://developers.line.biz/console/",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: one origin for api.line.me and api-data.line.me (a proxy); default LINE's own.",
        ),
    )

    _http: httpx.AsyncClient | None = None

    def _secret(self, key: str) -> str:
        return str(self.credentials.get(key) or "").strip()

    @staticmethod
    def text_length(text: str) -> int:
        return len(text.encode("utf-16-le")) // 2

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        secret = self._secret("channel_secret")
        if not secret:
            raise InboundRefusedError("forged", "the bot has no channel_secret; copy it from the LINE console")
        given = request.header("x-line-signature")
        if not given:
            raise InboundRefusedError("forged", "the request carries no X-Line-Signature", status=401)
        expected = base64.b64encode(hmac.new(secret.encode(), request.body, hashlib.sha256).digest()).decode()
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise InboundRefusedError("forged", "the X-Line-Signature does not match", status=401)

    def parse(self, request: InboundRequest) -> InboundBatch:
        body = inbound_json_object(request.body, what="not a LINE webhook")
        updates: list[InboundUpdate] = []
        with malformed_unless_shaped("not a LINE webhook"):
            events = body.get("events") or []
            if not isinstance(events, list):
                raise TypeError("events")
            for event in events:
                updates.extend(self._updates(event, destination=str(body.get("destination") or "")))
        # An empty `events` list is the console's "Verify" button: answered 200 like any other.
        return InboundBatch(updates=updates)

    def _updates(self, event: dict[str, Any], *, destination: str) -> list[InboundUpdate]:
        if event.get("type") != "message":
            if event.get("mode", "active") != "active":
                return []
            return [InboundUpdate(envelope=e) for e in self._events(event)]
        update = self._update(event, destination=destination)
        return [update] if update is not None else []

    def _events(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events beyond messages (docs/platform-events.md): follow / unfollow (a user befriending or
        blocking the bot) → member.joined / member.left in the one-to-one chat, join → bot.added,
        memberJoined / memberLeft → one member event per member, postback → card.clicked (its `data` in
        `data.action`), unsend → message.recalled. A reply token comes with those that have one."""
        kind = str(event.get("type") or "")
        source = event.get("source") or {}
        source_type = str(source.get("type") or "user")
        user = str(source.get("userId") or "")
        chat = str(source.get("groupId") or source.get("roomId") or user)
        if not chat:
            return []
        delivery = str(event.get("webhookEventId") or "")
        if not delivery:
            raise ValueError("no webhookEventId")
        timestamp = event.get("timestamp")
        event_time = float(timestamp) / 1000 if isinstance(timestamp, int | float) else time.time()
        reply_token = str(event.get("replyToken") or "")
        target = ReplyTarget(
            chat_id=chat,
            extra={"reply_token": reply_token, "reply_until": event_time + REPLY_TOKEN_SECONDS} if reply_token else {},
        )
        common: dict[str, Any] = {
            "source_event_type": kind,
            "chat_id": chat,
            "chat_type": "group" if source_type in GROUP_SOURCES else "private",
            "reply_target": target,
            "raw": event,
            "event_time": event_time,
        }
        event_id = f"line:{self.bot_id}:{delivery}"
        simple = {"follow": "member.joined", "unfollow": "member.left", "join": "bot.added"}
        if kind in simple:
            return [
                platform_event_envelope(event_id=event_id, event_type=simple[kind], actor_id=user or None, **common)
            ]
        if kind in ("memberJoined", "memberLeft"):
            members = (event.get("joined" if kind == "memberJoined" else "left") or {}).get("members") or []
            ids = [str(m.get("userId")) for m in members if isinstance(m, dict) and m.get("userId")]
            return [
                platform_event_envelope(
                    event_id=f"{event_id}:{member}" if len(ids) > 1 else event_id,
                    event_type="member.joined" if kind == "memberJoined" else "member.left",
                    actor_id=member,
                    **common,
                )
                for member in ids
            ]
        if kind == "postback":
            postback = event.get("postback") or {}
            action: Any = str(postback.get("data") or "")
            if postback.get("params"):
                action = {"data": action, "params": postback["params"]}
            return [
                platform_event_envelope(
                    event_id=event_id, event_type="card.clicked", actor_id=user or None, action=action, **common
                )
            ]
        if kind == "unsend":
            message_id = str((event.get("unsend") or {}).get("messageId") or "")
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type="message.recalled",
                    actor_id=user or None,
                    target_message_id=message_id or None,
                    **common,
                )
            ]
        return []

    def _update(self, event: dict[str, Any], *, destination: str) -> InboundUpdate | None:
        if event.get("mode", "active") != "active":
            return None  # a standby channel does not answer
        message = event["message"]
        source = event.get("source") or {}
        kind = str(message.get("type") or "")
        message_id = str(message["id"])
        source_type = str(source.get("type") or "user")
        user = str(source.get("userId") or "")
        chat = str(source.get("groupId") or source.get("roomId") or user)
        if not chat or not message_id:
            raise ValueError("no chat or message id")
        files: list[PlatformFileRef] = []
        text = ""
        mentioned = True
        if kind == "text":
            text = str(message.get("text") or "")
            if source_type in GROUP_SOURCES:
                mentionees = (message.get("mention") or {}).get("mentionees") or []
                mentioned = any(isinstance(m, dict) and m.get("isSelf") is True for m in mentionees)
        elif kind in FILE_KINDS:
            provider = (message.get("contentProvider") or {}).get("type", "line")
            if provider != "line":
                return None  # content on another server (an external URL): not fetched
            name = str(message.get("fileName") or FILE_NAMES[kind])
            size = message.get("fileSize")
            files.append(
                PlatformFileRef(
                    ref={"message_id": message_id},
                    name=name,
                    kind=FILE_KINDS[kind],
                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                )
            )
        if not text and not files:
            return None  # stickers, locations
        event_id = str(event.get("webhookEventId") or message_id)
        timestamp = event.get("timestamp")
        event_time = float(timestamp) / 1000 if isinstance(timestamp, int | float) else time.time()
        reply_token = str(event.get("replyToken") or "")
        target = ReplyTarget(
            chat_id=chat,
            extra={"reply_token": reply_token, "reply_until": event_time + REPLY_TOKEN_SECONDS} if reply_token else {},
        )
        chat_type = "group" if source_type in GROUP_SOURCES else "private"
        envelope = {
            "event_id": f"line:{self.bot_id}:{event_id}",
            "event_type": "message.received",
            "source_event_type": f"message.{kind}",
            "actor": {"actor_type": "user", "actor_id": user or chat, "actor_name": (user or chat)[:255]},
            "subject": {"subject_type": "message", "subject_id": message_id, "data": {"chat_type": chat_type}},
            "input": {"text": text or None},
            "data": {
                "chat_id": chat,
                "chat_type": chat_type,
                "line_source_type": source_type,
                "mentioned": mentioned,
                "destination": destination,
                "reply_target": target.as_data(),
                "raw": event,
            },
            "event_time": event_time,
        }
        return InboundUpdate(envelope=envelope, files=files)

    # -- HTTP -----------------------------------------------------------------------------------
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            if not self._secret("channel_access_token"):
                raise PlatformAPIError("the bot has no LINE channel_access_token")
            self._http = httpx.AsyncClient(
                headers={"Authorization": f"Bearer {self._secret('channel_access_token')}"},
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

    async def _call(self, what: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http().request(method, url, **kwargs)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"LINE {what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"LINE {what}: {exc}", exc) from exc
        if response.status_code == 429:
            raise PlatformAPIError(f"LINE {what}: rate limited", retry_after=_retry_after(response))
        if response.status_code >= 400:
            detail = _message_of(response)
            raise PlatformAPIError(
                f"LINE {what}: HTTP {response.status_code}: {detail}",
                retryable=response.status_code >= 500,
                outcome_unknown=response.status_code >= 500 and method == "POST",
            )
        return response

    async def identity(self) -> str:
        base = self.api_base_url or DEFAULT_API_BASE_URL
        info = (await self._call("bot/info", "GET", f"{base}/v2/bot/info")).json()
        name = info.get("displayName") if isinstance(info, dict) else None
        basic = info.get("basicId") if isinstance(info, dict) else None
        return f"LINE knows this bot as {name or '?'} ({basic or 'no basic id'})"

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        message_id = str(ref.ref.get("message_id") or "")
        if not message_id.isascii() or not message_id.isalnum():
            raise PlatformAPIError("the file reference has no message id")
        base = self.api_base_url or DEFAULT_DATA_BASE_URL
        response = await self._call("content", "GET", f"{base}/v2/bot/message/{message_id}/content")
        mime_type = response.headers.get("content-type", "").split(";")[0].strip() or ref.mime_type
        return FetchedFile(data=response.content, name=ref.name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    async def _reply_token(self, target: ReplyTarget) -> str | None:
        """The event's reply token while fresh, taken once (the cache is shared by the workers)."""
        token = str(target.extra.get("reply_token") or "")
        until = target.extra.get("reply_until")
        if not token or not isinstance(until, int | float) or time.time() >= until:
            return None
        key = f"platforms:line:reply-token:{hashlib.sha256(token.encode()).hexdigest()}"
        return token if await cache.aadd(key, 1, timeout=int(REPLY_TOKEN_SECONDS * 3)) else None

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        messages = [{"type": "text", "text": text}]
        base = self.api_base_url or DEFAULT_API_BASE_URL
        token = await self._reply_token(target)
        if token is not None:
            try:
                response = await self._call(
                    "reply", "POST", f"{base}/v2/bot/message/reply", json={"replyToken": token, "messages": messages}
                )
                return SentMessage(chat_id=target.chat_id, message_id=_sent_id(response))
            except PlatformAPIError as exc:
                # A token LINE calls invalid (expired meanwhile) was not used: push instead. Anything else
                # (a 5xx, a lost answer) may have been delivered, and is the caller's to judge.
                if exc.outcome_unknown or exc.retryable or "Invalid reply token" not in str(exc):
                    raise
        response = await self._call(
            "push",
            "POST",
            f"{base}/v2/bot/message/push",
            json={"to": target.chat_id, "messages": messages},
            headers={"X-Line-Retry-Key": str(uuid.uuid4())},
        )
        return SentMessage(chat_id=target.chat_id, message_id=_sent_id(response))


def _sent_id(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body["sentMessages"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


def _message_of(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("message") or "")[:200] if isinstance(body, dict) else ""


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(1.0, float(response.headers.get("retry-after") or 1))
    except ValueError:
        return 1.0
