"""KOOK (开黑啦): the WebSocket gateway in (the connector process holds it; no public URL needed), the HTTP
API v3 out — channel messages `POST /message/create`, direct messages `POST /direct-message/create`, both
in KMarkdown, edited with `/message/update` (`/direct-message/update`), reactions with
`/message/add-reaction` — on httpx and `websockets`, with the bot's token (`Authorization: Bot …`).

Credentials: `token` (the bot's token from the developer centre: 应用 → 机器人 → Token, connection mode
WebSocket), optional `api_base_url` (the API's base, default `https://www.kookapp.cn/api/v3`; the gateway
is the one its `GET /gateway/index?compress=0` names, so a proxy or a fake serves both).

The gateway session: HELLO (`s: 1`, its `session_id`), PING every 30 s carrying the last event's `sn`
(`s: 2`) answered by PONG (`s: 3`; none within 6 s closes the socket), events (`s: 0`, numbered by `sn`),
RECONNECT (`s: 5`: start over with a new gateway address, forgetting the session), and after a drop a
resume: the gateway address with `resume=1`, the last `sn` and the `sessionId`, on which KOOK sends the
events missed meanwhile and then RESUME ACK (`s: 6`). An event is one gateway event however often it comes: its
`event_id` is KOOK's `msg_id`.

In a channel every message reaches the gateway; `data.mentioned` says whether it @-mentions the bot (the
binding's trigger filter decides which to answer: by default only those). Direct messages are private
chats. System events become the pinned event types: `joined_guild`/`joined_channel` → `member.joined`,
`exited_guild`/`exited_channel` → `member.left`, `added_reaction`/`deleted_reaction` (and their private
twins) → `reaction.added`/`reaction.removed`, `updated_message` → `message.edited`, `deleted_message` →
`message.recalled`, `message_btn_click` → `card.clicked`, `self_joined_guild` → `bot.added`. The bot's own
messages and other bots' are ignored. The webhook mode (verify token, AES-encrypted pushes) is not built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import Any, ClassVar
from urllib.parse import urlencode, urlsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.adapters.longconn import event_update, socket_address
from platforms.interface import (
    ConnectionClosedError,
    CredentialField,
    FetchedFile,
    InboundBatch,
    InboundRefusedError,
    InboundRequest,
    InboundUpdate,
    PlatformAdapter,
    PlatformAPIError,
    PlatformCapabilities,
    PlatformConnector,
    PlatformFileRef,
    ReplyTarget,
    SentMessage,
    transport_failure,
)

logger = logging.getLogger(__name__)

DEFAULT_API_BASE_URL = "https://www.kookapp.cn/api/v3"
REQUEST_TIMEOUT = 30.0
KMARKDOWN = 9
# Message types KOOK sends: 1 text, 2 image, 3 video, 4 file, 8 audio, 9 KMarkdown, 10 card, 255 system.
TEXT_TYPES = frozenset({1, KMARKDOWN})
FILE_TYPES = {2: "image", 3: "video", 4: "file", 8: "audio"}
SYSTEM = 255
# HELLO codes after which reconnecting with the same token cannot help: the token is invalid or refused.
FATAL_HELLO_CODES = frozenset({40101, 40102})
FILE_HOSTS = ("kookapp.cn", "kaiheila.cn", "chuanyuapp.com")
_MENTION = re.compile(r"\(met\)(\d+|all|here)\(met\)")
_ROLE = re.compile(r"\(rol\)\d+\(rol\)")
_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")

_MEMBER_EVENTS = {
    "joined_guild": "member.joined",
    "joined_channel": "member.joined",
    "exited_guild": "member.left",
    "exited_channel": "member.left",
}
_REACTION_EVENTS = {
    "added_reaction": "reaction.added",
    "deleted_reaction": "reaction.removed",
    "private_added_reaction": "reaction.added",
    "private_deleted_reaction": "reaction.removed",
}


class KookUnauthorizedError(PlatformAPIError):
    """KOOK refused the bot's token."""


def _text_of(content: str, bot_user_id: str) -> tuple[str, bool]:
    """The message's text without KOOK's mention markers, and whether it mentioned the bot."""
    mentioned = bool(bot_user_id) and f"(met){bot_user_id}(met)" in content
    text = _MENTION.sub(lambda m: "" if m.group(1) == bot_user_id else f"@{m.group(1)}", content)
    return _ROLE.sub("", text).strip(), mentioned


class KookAdapter(PlatformAdapter):
    platform: ClassVar[str] = "kook"
    # KOOK's documentation names no limit on a message's length: replies are split at 7,000 characters (an
    # assumption, not a documented figure); streaming writes once a second, a 429 is waited out.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=False,
        threads=False,
        max_message_chars=7000,
        edit_interval_seconds=1.0,
        max_file_bytes=30 * 1024 * 1024,
        event_types=(
            "member.joined",
            "member.left",
            "reaction.added",
            "reaction.removed",
            "message.edited",
            "message.recalled",
            "card.clicked",
            "bot.added",
        ),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("token", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "token",
            required=True,
            secret=True,
            help="The bot's token: KOOK developer centre → the application → 机器人 (Bot) → Token, with the "
            "connection mode set to WebSocket.",
            link="https://developer.kookapp.cn/app/index",
        ),
        CredentialField("api_base_url", help="Optional: the API's base (default https://www.kookapp.cn/api/v3)."),
    )
    connector_class: ClassVar[type[PlatformConnector] | None] = None  # set below the connector's class
    # No webhook: events come only over the connector (the webhook route answers 404).
    connection_kinds: ClassVar[tuple[str, ...]] = ("gateway WebSocket",)

    _http: httpx.AsyncClient | None = None
    _me: dict[str, Any] | None = None

    @property
    def token(self) -> str:
        return str(self.credentials.get("token") or "").strip()

    @property
    def base_url(self) -> str:
        return self.api_base_url or DEFAULT_API_BASE_URL

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            if not self.token:
                raise PlatformAPIError("the bot has no KOOK token (credentials.token)")
            self._http = httpx.AsyncClient(
                # Through the outbound address guard; no proxy from the environment.
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=REQUEST_TIMEOUT,
                follow_redirects=False,
                headers={"Authorization": f"Bot {self.token}"},
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def request(self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any) -> Any:
        """One API call; KOOK answers `{"code", "message", "data"}`, `code` 0 when it was carried out."""
        what = f"KOOK {method} {path}"
        try:
            response = await self.http().request(method, f"{self.base_url}{path}", **kwargs)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"{what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            error = transport_failure(f"{what}: {exc}", exc)
            error.outcome_unknown = error.outcome_unknown and not idempotent
            raise error from exc
        if response.status_code == 429:
            raise PlatformAPIError(f"{what}: rate limited", retry_after=_retry_after(response))
        if response.status_code == 401:
            raise KookUnauthorizedError(f"{what}: HTTP 401, the token was refused")
        if response.status_code >= 500:
            raise PlatformAPIError(
                f"{what}: HTTP {response.status_code}", retryable=True, outcome_unknown=not idempotent
            )
        try:
            body = response.json()
        except ValueError:
            raise PlatformAPIError(f"{what}: HTTP {response.status_code}, not JSON") from None
        if not isinstance(body, dict):
            raise PlatformAPIError(f"{what}: HTTP {response.status_code}, not a KOOK answer")
        code = body.get("code")
        if code != 0:
            message = str(body.get("message") or "")[:200]
            if code in (401, 40100, 40101, 40102, 40103):
                raise KookUnauthorizedError(f"{what}: code {code} {message}".strip())
            raise PlatformAPIError(f"{what}: code {code} {message}".strip())
        data = body.get("data")
        return data if data is not None else {}

    async def me(self) -> dict[str, Any]:
        """The bot's own user (`GET /user/me`), asked once per adapter."""
        if self._me is None:
            found = await self.request("GET", "/user/me", idempotent=True)
            self._me = found if isinstance(found, dict) else {}
        return self._me

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        raise InboundRefusedError("malformed", "KOOK events arrive over the gateway, not a webhook", status=404)

    def parse(self, request: InboundRequest) -> InboundBatch:  # pragma: no cover - verify refuses first
        return InboundBatch()

    def event_update(self, event: dict[str, Any], *, bot_user_id: str) -> InboundUpdate | None:
        """The update of a gateway event's `d`, or None when it is nothing for the bot (its own message, a
        card, a system event without a pinned type). Raises ValueError/TypeError/KeyError on junk."""
        kind = int(event["type"])
        msg_id = str(event["msg_id"])
        if not _ID.match(msg_id):
            raise ValueError("msg_id")
        extra = event.get("extra") or {}
        if not isinstance(extra, dict):
            raise TypeError("extra")
        if kind == SYSTEM:
            return self._system_update(event, extra, msg_id, bot_user_id=bot_user_id)
        author_id = str(event.get("author_id") or "")
        author: dict[str, Any] = extra["author"] if isinstance(extra.get("author"), dict) else {}
        if not author_id or author_id == bot_user_id or author.get("bot"):
            return None
        channel_type = str(event.get("channel_type") or "")
        if channel_type not in ("GROUP", "PERSON"):
            return None  # BROADCAST and whatever KOOK adds: not a chat the bot answers in
        direct = channel_type == "PERSON"
        content = str(event.get("content") or "")
        files: list[PlatformFileRef] = []
        if kind in TEXT_TYPES:
            text, mentioned = _text_of(content, bot_user_id)
            mention_ids = [str(m) for m in extra.get("mention") or () if isinstance(m, str | int)]
            mentioned = mentioned or bot_user_id in mention_ids
        elif kind in FILE_TYPES:
            attach: dict[str, Any] = extra["attachments"] if isinstance(extra.get("attachments"), dict) else {}
            url = str(attach.get("url") or content)
            files.append(
                PlatformFileRef(
                    ref={"url": url},
                    name=str(attach.get("name") or f"{FILE_TYPES[kind]}-{msg_id}")[:200],
                    mime_type=str(attach.get("file_type") or ""),
                    size=attach.get("size") if isinstance(attach.get("size"), int) else None,
                    kind=FILE_TYPES[kind],
                )
            )
            text, mentioned = "", False
        else:
            return None  # cards and anything newer: nothing a runner reads
        if not text and not files:
            return None
        # A direct message is answered in the user's direct chat; a channel message in its channel, quoting it.
        chat = author_id if direct else str(event["target_id"])
        target = ReplyTarget(
            chat_id=chat,
            reply_to_message_id=None if direct else msg_id,
            extra={"kind": "direct" if direct else "channel"},
        )
        chat_type = "private" if direct else "group"
        return InboundUpdate(
            envelope={
                "event_id": f"kook:{self.bot_id}:{msg_id}",
                "event_type": "message.received",
                "source_event_type": f"message:{kind}",
                "actor": {
                    "actor_type": "user",
                    "actor_id": author_id,
                    "actor_name": str(author.get("nickname") or author.get("username") or author_id)[:255],
                },
                "subject": {
                    "subject_type": "message",
                    "subject_id": msg_id,
                    "data": {"guild_id": extra.get("guild_id"), "chat_type": chat_type},
                },
                "input": {"text": text or None},
                "data": {
                    "chat_id": chat,
                    "chat_type": chat_type,
                    "mentioned": True if direct else mentioned,
                    "guild_id": str(extra.get("guild_id") or ""),
                    "reply_target": target.as_data(),
                    "raw": event,
                },
                "event_time": _event_time(event.get("msg_timestamp")),
            },
            files=files,
        )

    def _system_update(
        self, event: dict[str, Any], extra: dict[str, Any], msg_id: str, *, bot_user_id: str
    ) -> InboundUpdate | None:
        name = str(extra.get("type") or "")
        body = extra.get("body")
        if not isinstance(body, dict):
            return None
        base: dict[str, Any] = {
            "event_id": f"kook:{self.bot_id}:{msg_id}",
            "source_event_type": name,
        }
        guild = str(event.get("target_id") or "")
        if name in _MEMBER_EVENTS:
            user = str(body["user_id"])
            channel = str(body.get("channel_id") or "")
            if user == bot_user_id:
                return None
            return event_update(
                **base,
                event_type=_MEMBER_EVENTS[name],
                chat_id=channel or guild,
                chat_type="group",
                actor_id=user,
                reply_target=ReplyTarget(chat_id=channel, extra={"kind": "channel"}) if channel else None,
                extra={"guild_id": guild},
                raw=event,
            )
        if name == "self_joined_guild":
            return event_update(
                **base,
                event_type="bot.added",
                chat_id=str(body.get("guild_id") or guild),
                chat_type="group",
                actor_id=bot_user_id,
                extra={"guild_id": str(body.get("guild_id") or guild)},
                raw=event,
            )
        if name in _REACTION_EVENTS:
            user = str(body["user_id"])
            if user == bot_user_id:
                return None
            private = name.startswith("private_")
            emoji: dict[str, Any] = body["emoji"] if isinstance(body.get("emoji"), dict) else {}
            chat = user if private else str(body["channel_id"])
            target = str(body["msg_id"])
            return event_update(
                **base,
                event_type=_REACTION_EVENTS[name],
                chat_id=chat,
                chat_type="private" if private else "group",
                actor_id=user,
                target_message_id=target,
                reply_target=ReplyTarget(chat_id=chat, extra={"kind": "direct" if private else "channel"}),
                extra={"reaction": str(emoji.get("name") or emoji.get("id") or "")},
                raw=event,
            )
        if name in ("updated_message", "updated_private_message"):
            private = name == "updated_private_message"
            author = str(body.get("author_id") or "")
            if author and author == bot_user_id:
                return None
            text, mentioned = _text_of(str(body.get("content") or ""), bot_user_id)
            if not text:
                return None
            chat = author if private else str(body["channel_id"])
            target = str(body["msg_id"])
            return event_update(
                **base,
                event_type="message.edited",
                chat_id=chat,
                chat_type="private" if private else "group",
                actor_id=author or "unknown",
                target_message_id=target,
                text=text,
                reply_target=ReplyTarget(
                    chat_id=chat,
                    reply_to_message_id=None if private else target,
                    extra={"kind": "direct" if private else "channel"},
                ),
                extra={"mentioned": True if private else mentioned},
                raw=event,
            )
        if name in ("deleted_message", "deleted_private_message"):
            private = name == "deleted_private_message"
            chat = str(body.get("author_id") or "") if private else str(body["channel_id"])
            return event_update(
                **base,
                event_type="message.recalled",
                chat_id=chat,
                chat_type="private" if private else "group",
                actor_id=str(body.get("author_id") or "unknown"),
                target_message_id=str(body["msg_id"]),
                raw=event,
            )
        if name == "message_btn_click":
            user = str(body["user_id"])
            where = str(body.get("target_id") or "")
            private = str(body.get("channel_type") or "") == "PERSON" or not where or where == user
            chat = user if private else where
            return event_update(
                **base,
                event_type="card.clicked",
                chat_id=chat,
                chat_type="private" if private else "group",
                actor_id=user,
                target_message_id=str(body.get("msg_id") or ""),
                reply_target=ReplyTarget(chat_id=chat, extra={"kind": "direct" if private else "channel"}),
                extra={"action": str(body.get("value") or "")[:1000]},
                raw=event,
            )
        return None

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        url = str(ref.ref.get("url") or "")
        host = (urlsplit(url).hostname or "").lower()
        api_host = (urlsplit(self.base_url).hostname or "").lower()
        # Only KOOK's own file hosts (or the API's own host: a proxy, a fake); a message cannot point the
        # host at an address of its choosing.
        if urlsplit(url).scheme not in ("https", "http") or not (
            host == api_host or any(host == h or host.endswith(f".{h}") for h in FILE_HOSTS)
        ):
            raise PlatformAPIError("the file is not on KOOK's file hosts")
        try:
            response = await self.http().get(url)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"KOOK file: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"KOOK file: {exc}", exc) from exc
        if response.status_code >= 400:
            raise PlatformAPIError(f"KOOK file: HTTP {response.status_code}", retryable=response.status_code >= 500)
        mime = ref.mime_type or response.headers.get("content-type", "").split(";")[0]
        return FetchedFile(data=response.content, name=ref.name, mime_type=mime)

    # -- outbound -------------------------------------------------------------------------------
    @staticmethod
    def _direct(target_extra: dict[str, Any]) -> bool:
        return target_extra.get("kind") == "direct"

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        if not _ID.match(target.chat_id):
            raise PlatformAPIError(f"not a KOOK channel or user id: {target.chat_id!r}")
        body: dict[str, Any] = {"type": KMARKDOWN, "target_id": target.chat_id, "content": text}
        if target.reply_to_message_id:
            body["quote"] = target.reply_to_message_id
        path = "/direct-message/create" if self._direct(target.extra) else "/message/create"
        sent = await self.request("POST", path, json=body)
        message_id = str(sent.get("msg_id") or "") if isinstance(sent, dict) else ""
        # The chat id carries whether it is a direct chat, for the edits and reactions that name it later.
        chat = f"direct:{target.chat_id}" if self._direct(target.extra) else target.chat_id
        return SentMessage(chat_id=chat, message_id=message_id)

    async def edit_text(self, message: SentMessage, text: str) -> None:
        path = "/direct-message/update" if message.chat_id.startswith("direct:") else "/message/update"
        await self.request("POST", path, idempotent=True, json={"msg_id": message.message_id, "content": text})

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        path = "/direct-message/add-reaction" if message.chat_id.startswith("direct:") else "/message/add-reaction"
        # Reacting twice with one emoji leaves one reaction: safe to repeat.
        await self.request("POST", path, idempotent=True, json={"msg_id": message.message_id, "emoji": reaction})

    async def identity(self) -> str:
        me = await self.me()
        return f"KOOK knows this bot as {me.get('username') or '?'}#{me.get('identify_num') or '?'} (id {me.get('id')})"

    async def webhook_register(self, url: str) -> str:
        """KOOK needs no webhook here: checks the token and says that the connector process carries events."""
        me = await self.me()
        return f"{me.get('username') or 'the bot'}: KOOK events come over the gateway (the connector process)"


def _event_time(value: Any) -> float:
    try:
        return float(value) / 1000
    except (TypeError, ValueError):
        return time.time()


def _retry_after(response: httpx.Response) -> float:
    for header in ("x-rate-limit-reset", "retry-after"):
        try:
            return max(1.0, float(response.headers.get(header) or ""))
        except ValueError:
            continue
    return 1.0


class GatewayClosedError(ConnectionClosedError):
    """The connection ended (see `ConnectionClosedError`)."""


class KookConnector(PlatformConnector):
    """The bot's gateway session: the gateway's address from the API, HELLO, PINGs with the last `sn`,
    each event handed to `on_update`; after a drop a RESUME from the last `sn`, after RECONNECT a new
    session. A session that reached HELLO resets the backoff."""

    adapter: KookAdapter
    ping_interval: ClassVar[float] = 30.0
    pong_timeout: ClassVar[float] = 6.0
    closed_detail: ClassVar[str] = "the gateway closed the connection"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bot_user_id = ""
        self.sn = 0
        self.session_id = ""
        self.sessions = 0

    async def run(self) -> None:
        await self.hold(self._held_session)

    async def _held_session(self) -> None:
        try:
            await self._session()
        except KookUnauthorizedError as exc:  # a refused token: no use connecting again soon
            raise GatewayClosedError(str(exc), fatal=True) from exc

    async def _gateway_url(self) -> str:
        data = await self.adapter.request("GET", "/gateway/index", idempotent=True, params={"compress": 0})
        url = str(data.get("url") or "") if isinstance(data, dict) else ""
        if not url:
            raise GatewayClosedError("the API named no gateway")
        if self.session_id and self.sn:
            joiner = "&" if "?" in url else "?"
            url += joiner + urlencode({"resume": 1, "sn": self.sn, "sessionId": self.session_id})
        return url

    async def _session(self) -> None:
        if not self.bot_user_id:
            self.bot_user_id = str((await self.adapter.me()).get("id") or "")
        url = await self._gateway_url()
        address, port = await socket_address(url, allow_private=self.adapter.allow_private)
        async with websockets.connect(url, max_size=2**22, open_timeout=20, host=address, port=port) as socket:
            self.sessions += 1
            hello = json.loads(await asyncio.wait_for(socket.recv(), timeout=20))
            if not isinstance(hello, dict) or hello.get("s") != 1:
                raise GatewayClosedError(f"the gateway did not say HELLO (s {hello.get('s')})")
            code = int((hello.get("d") or {}).get("code") or 0)
            if code:
                self.session_id, self.sn = "", 0
                raise GatewayClosedError(
                    f"the gateway refused the session (code {code})", fatal=code in FATAL_HELLO_CODES
                )
            given = str((hello.get("d") or {}).get("session_id") or "")
            resuming = bool(self.session_id and self.sn) and given in ("", self.session_id)
            if not resuming:
                self.sn = 0  # a new session numbers its events from 1 again
            self.session_id = given or self.session_id
            self.state, self.detail = "connected", ""
            ponged = asyncio.Event()
            ponged.set()
            pinger = asyncio.create_task(self._ping(socket, ponged))
            try:
                await self._receive(socket, ponged)
            finally:
                pinger.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pinger

    async def _ping(self, socket: ClientConnection, ponged: asyncio.Event) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                await asyncio.sleep(self.ping_interval)
                ponged.clear()
                await socket.send(json.dumps({"s": 2, "sn": self.sn}))
                try:
                    await asyncio.wait_for(ponged.wait(), self.pong_timeout)
                except TimeoutError:
                    # A zombied connection: close it so the session starts over (resuming).
                    await socket.close(1000, "no pong")
                    return

    async def _receive(self, socket: ClientConnection, ponged: asyncio.Event) -> None:
        try:
            async for raw in socket:
                try:
                    frame = json.loads(raw)
                except ValueError:
                    logger.warning("kook bot %s: a frame that is not JSON was ignored", self.adapter.bot_id)
                    continue
                if not isinstance(frame, dict):
                    continue
                signal = frame.get("s")
                if signal == 0:
                    await self._event(frame)
                elif signal == 3:
                    ponged.set()
                elif signal == 5:
                    # RECONNECT: the session is gone; start over from a new gateway address.
                    self.session_id, self.sn = "", 0
                    raise GatewayClosedError("the gateway asked to reconnect")
                elif signal == 6:
                    self.state, self.detail = "connected", ""
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            raise GatewayClosedError(f"the connection closed ({code or 'no close frame'})") from exc
        raise GatewayClosedError(f"the connection closed ({socket.close_code})")

    async def _event(self, frame: dict[str, Any]) -> None:
        sn = frame.get("sn")
        if isinstance(sn, int) and not isinstance(sn, bool):
            if self.sn and sn <= self.sn:
                return  # sent again after a resume: already handed on
            self.sn = sn
        data = frame.get("d")
        if not isinstance(data, dict):
            return
        try:
            update = self.adapter.event_update(data, bot_user_id=self.bot_user_id)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            logger.warning("kook bot %s: an event of the wrong shape was ignored (%s)", self.adapter.bot_id, exc)
            return
        if update is None:
            return
        try:
            await self.on_update(update)
        except Exception:
            # One event that cannot become a gateway event must not drop the bot's connection.
            logger.exception("kook bot %s: an event could not be accepted", self.adapter.bot_id)


KookAdapter.connector_class = KookConnector
