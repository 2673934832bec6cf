"""Satori: one protocol in front of many chat platforms (Koishi's server plugin, Chronocat, LLOneBot and
other Satori servers). Events come over the server's WebSocket (`/v1/events`: IDENTIFY with the token and
the last event's `sn`, READY naming the logins, PING/PONG every 10 s, EVENT signals), which the connector
process holds; replies go to the HTTP API (`POST /v1/message.create`, `message.update` for streaming by
edits, `reaction.create`) with the `Satori-Platform` and `Satori-User-ID` headers naming the login.

Credentials: `endpoint` (the server's address with its path prefix, e.g. `http://127.0.0.1:5140/satori`;
the API is `<endpoint>/v1/…`, the events `ws(s)://…/v1/events`), `token`? (the server's token, sent as
`Authorization: Bearer …` and in IDENTIFY), `platform` and `self_id` (the login this bot is: a server
carrying several bots sends every login's events; the others are ignored). `api_base_url`, when set, is
used instead of `endpoint`.

Messages are Satori message elements (an XML-like markup): text is unescaped, `<at>` of the bot makes
`data.mentioned` true (and is removed), other `<at>`s become `@name`, `<img>`/`<file>`/`<audio>`/`<video>`
become files fetched from their `src`, `<quote>` is dropped, `<br/>` and `<p>` are line breaks; replies are
escaped text (quoting the question in groups). A `DIRECT` channel is a private chat, any other a group.
Events: `message-created` → `message.received`, `message-updated` → `message.edited`, `message-deleted` →
`message.recalled`, `guild-member-added`/`-removed` → `member.joined`/`member.left`, `guild-added` →
`bot.added`, `reaction-added`/`-removed` → `reaction.added`/`reaction.removed`, `interaction/button` →
`card.clicked`. The last event's `sn` is kept per bot (`PlatformCursor`), so a restarted connector asks the
server for what it missed; an event is one gateway event however often it comes (ids from the platform's
message, member and time, not the server's `sn`, which a restarted server numbers anew).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import json
import logging
import re
import time
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.adapters.longconn import cursor_get, cursor_set, event_update, socket_address
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

REQUEST_TIMEOUT = 30.0
CURSOR = "satori_sn"
DIRECT = 1  # Channel.Type.DIRECT


class OP:
    EVENT = 0
    PING = 1
    PONG = 2
    IDENTIFY = 3
    READY = 4
    META = 5


_TAG = re.compile(r"<(/?)([A-Za-z][\w:-]*)((?:\s+[^\s=/>]+(?:\s*=\s*\"[^\"]*\")?)*)\s*(/?)>")
_ATTR = re.compile(r"([^\s=/>]+)(?:\s*=\s*\"([^\"]*)\")?")
_FILE_ELEMENTS = {"img": "image", "image": "image", "file": "file", "audio": "audio", "video": "video"}

_EVENTS = {
    "message-updated": "message.edited",
    "message-deleted": "message.recalled",
    "guild-member-added": "member.joined",
    "guild-member-removed": "member.left",
    "guild-added": "bot.added",
    "reaction-added": "reaction.added",
    "reaction-removed": "reaction.removed",
    "interaction/button": "card.clicked",
}


def elements_read(content: str, self_id: str) -> tuple[str, bool, list[PlatformFileRef], str]:
    """A message's elements as (text, whether the bot is mentioned, its files, the id it quotes)."""
    text: list[str] = []
    files: list[PlatformFileRef] = []
    mentioned = False
    quoted = ""
    skip = 0  # inside a <quote>…</quote>: the quoted message is not this one's text
    position = 0
    for match in _TAG.finditer(content):
        if not skip:
            text.append(html.unescape(content[position : match.start()]))
        position = match.end()
        closing, name, attrs_raw, self_closing = match.group(1), match.group(2).lower(), match.group(3), match.group(4)
        attrs = {k.lower(): html.unescape(v or "") for k, v in _ATTR.findall(attrs_raw)}
        if name == "quote":
            if not closing:
                quoted = quoted or attrs.get("id", "")
                skip += 0 if self_closing else 1
            else:
                skip = max(0, skip - 1)
            continue
        if skip or closing:
            if name == "p" and closing and not skip:
                text.append("\n")
            continue
        if name == "at":
            if self_id and attrs.get("id") == self_id:
                mentioned = True
            elif attrs.get("type") in ("all", "here"):
                text.append(f"@{attrs['type']}")
            else:
                text.append(f"@{attrs.get('name') or attrs.get('id') or ''}")
        elif name == "sharp":
            text.append(f"#{attrs.get('name') or attrs.get('id') or ''}")
        elif name == "br":
            text.append("\n")
        elif name in _FILE_ELEMENTS and attrs.get("src"):
            src = attrs["src"]
            files.append(
                PlatformFileRef(
                    ref={"url": src},
                    name=(attrs.get("title") or urlsplit(src).path.rsplit("/", 1)[-1] or name)[:200],
                    kind=_FILE_ELEMENTS[name],
                )
            )
    if not skip:
        text.append(html.unescape(content[position:]))
    return re.sub(r"[ \t]+\n", "\n", "".join(text)).strip(), mentioned, files, quoted


def elements_of(text: str) -> str:
    """Plain text as Satori message elements (escaped; line breaks kept as they are)."""
    return html.escape(text, quote=True)


class SatoriAdapter(PlatformAdapter):
    platform: ClassVar[str] = "satori"
    # The platforms behind Satori differ; 4,000 characters is within most of them. `message.update` is a
    # Satori API, but a platform behind it may not carry it out (the server then answers an error).
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=False,
        threads=False,
        max_message_chars=4000,
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
    credential_keys: ClassVar[tuple[str, ...]] = ("endpoint", "token", "platform", "self_id", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "endpoint",
            required=True,
            help="The Satori server's address with its path, e.g. http://127.0.0.1:5140/satori (Koishi's "
            "server plugin) — the API is <endpoint>/v1/…, the events <endpoint>/v1/events.",
            pattern=r"^https?://",
            pattern_hint="an http(s):// address",
        ),
        CredentialField("token", secret=True, help="The Satori server's token, if it sets one."),
        CredentialField(
            "platform",
            required=True,
            help="The login's platform as the server names it (e.g. onebot, discord, qq): the server's "
            "console, or its READY signal's logins.",
        ),
        CredentialField("self_id", required=True, help="The login's user id on that platform (the bot's own id)."),
        CredentialField("api_base_url", help="Optional: used instead of endpoint (a proxy)."),
    )
    connector_class: ClassVar[type[PlatformConnector] | None] = None  # set below the connector's class
    # No webhook: events come only over the connector (the webhook route answers 404).
    connection_kinds: ClassVar[tuple[str, ...]] = ("event WebSocket",)

    _http: httpx.AsyncClient | None = None

    def _value(self, key: str) -> str:
        return str(self.credentials.get(key) or "").strip()

    @property
    def base_url(self) -> str:
        base = self.api_base_url or self._value("endpoint").rstrip("/")
        if not base.startswith(("https://", "http://")):
            raise PlatformAPIError("the bot has no Satori endpoint (http(s)://…)")
        return base

    @property
    def events_url(self) -> str:
        parts = urlsplit(self.base_url)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return urlunsplit((scheme, parts.netloc, f"{parts.path.rstrip('/')}/v1/events", "", ""))

    @property
    def self_id(self) -> str:
        return self._value("self_id")

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            headers = {
                "Satori-Platform": self._value("platform"),
                "Satori-User-ID": self.self_id,
                # Servers written before Satori 1.1 read these names.
                "X-Platform": self._value("platform"),
                "X-Self-ID": self.self_id,
            }
            if self._value("token"):
                headers["Authorization"] = f"Bearer {self._value('token')}"
            self._http = httpx.AsyncClient(
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=REQUEST_TIMEOUT,
                follow_redirects=False,
                headers=headers,
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def call(self, method: str, body: dict[str, Any], *, idempotent: bool = False) -> Any:
        """One Satori API call (`POST <endpoint>/v1/<method>` with a JSON body)."""
        what = f"Satori {method}"
        try:
            response = await self.http().post(f"{self.base_url}/v1/{method}", json=body)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"{what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            error = transport_failure(f"{what}: {exc}", exc)
            error.outcome_unknown = error.outcome_unknown and not idempotent
            raise error from exc
        if response.status_code == 429:
            try:
                wait = max(1.0, float(response.headers.get("retry-after") or 1))
            except ValueError:
                wait = 1.0
            raise PlatformAPIError(f"{what}: rate limited", retry_after=wait)
        if response.status_code >= 400:
            raise PlatformAPIError(
                f"{what}: HTTP {response.status_code} {response.text[:200]}".strip(),
                retryable=response.status_code >= 500,
                outcome_unknown=response.status_code >= 500 and not idempotent,
            )
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        raise InboundRefusedError("malformed", "Satori events arrive over the server's WebSocket", status=404)

    def parse(self, request: InboundRequest) -> InboundBatch:  # pragma: no cover - verify refuses first
        return InboundBatch()

    def _is_mine(self, body: dict[str, Any]) -> bool:
        login = _obj(body.get("login"))
        user = _obj(login.get("user"))
        platform = str(body.get("platform") or login.get("platform") or "")
        self_id = str(body.get("self_id") or user.get("id") or "")
        return platform == self._value("platform") and self_id == self.self_id

    def event_update(self, body: dict[str, Any]) -> InboundUpdate | None:
        """The update of an EVENT signal's body, or None when it is nothing for this bot (another login's,
        its own message, an event without a pinned type). Raises ValueError/TypeError/KeyError on junk."""
        kind = str(body["type"])
        if not self._is_mine(body):
            return None
        channel = _obj(body.get("channel"))
        guild = _obj(body.get("guild"))
        user = _obj(body.get("user"))
        message = _obj(body.get("message"))
        user_id = str(user.get("id") or "")
        if user_id and user_id == self.self_id and kind != "guild-added":
            return None  # the bot's own doing
        if user.get("is_bot") and kind.startswith("message-"):
            return None
        direct = channel.get("type") == DIRECT
        chat = str(channel.get("id") or "")
        chat_type = "private" if direct else "group"
        stamp = str(body.get("timestamp") or "")
        raw = {k: v for k, v in body.items() if k != "login"}
        if kind == "message-created":
            message_id = str(message["id"])
            if not chat or not message_id:
                raise ValueError("channel or message id")
            said, mentioned, files, _quoted = elements_read(str(message.get("content") or ""), self.self_id)
            if not said and not files:
                return None
            target = ReplyTarget(chat_id=chat, reply_to_message_id=None if direct else message_id)
            return InboundUpdate(
                envelope={
                    "event_id": self._event_id("message", message_id),
                    "event_type": "message.received",
                    "source_event_type": kind,
                    "actor": {
                        "actor_type": "user",
                        "actor_id": user_id or "unknown",
                        "actor_name": str(user.get("nick") or user.get("name") or user_id)[:255],
                    },
                    "subject": {
                        "subject_type": "message",
                        "subject_id": message_id,
                        "data": {"guild_id": guild.get("id"), "chat_type": chat_type},
                    },
                    "input": {"text": said or None},
                    "data": {
                        "chat_id": chat,
                        "chat_type": chat_type,
                        "mentioned": True if direct else mentioned,
                        "guild_id": str(guild.get("id") or ""),
                        "reply_target": target.as_data(),
                        "raw": raw,
                    },
                    "event_time": _event_time(body.get("timestamp")),
                },
                files=files,
            )
        event_type = _EVENTS.get(kind)
        if event_type is None:
            return None
        message_id = str(message.get("id") or "")
        extra: dict[str, Any] = {"guild_id": str(guild.get("id") or "")}
        text: str | None = None
        reply: ReplyTarget | None = ReplyTarget(chat_id=chat) if chat else None
        if event_type == "message.edited":
            text, mentioned, _files, _quoted = elements_read(str(message.get("content") or ""), self.self_id)
            if not text:
                return None
            extra["mentioned"] = True if direct else mentioned
            reply = ReplyTarget(chat_id=chat, reply_to_message_id=None if direct else message_id)
        elif event_type.startswith("reaction."):
            emoji = body.get("emoji")
            extra["reaction"] = str(emoji.get("name") or emoji.get("id") or "") if isinstance(emoji, dict) else ""
        elif event_type == "card.clicked":
            button = _obj(body.get("button"))
            extra["action"] = str(button.get("id") or "")[:1000]
        where = chat or str(guild.get("id") or "")
        if not where:
            raise ValueError("no channel or guild")
        return event_update(
            event_id=self._event_id(kind, where, message_id, user_id, stamp),
            event_type=event_type,
            source_event_type=kind,
            chat_id=where,
            chat_type="private" if direct else "group",
            actor_id=user_id or "unknown",
            actor_name=str(user.get("name") or ""),
            target_message_id=message_id,
            text=text,
            reply_target=reply if event_type != "bot.added" else None,
            extra=extra,
            raw=raw,
        )

    def _event_id(self, *parts: str) -> str:
        if parts[0] == "message" and re.fullmatch(r"[A-Za-z0-9._:@-]{1,100}", parts[1]):
            return f"satori:{self.bot_id}:{parts[1]}"
        digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]
        return f"satori:{self.bot_id}:{parts[0].replace('/', '-')}:{digest}"

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        url = str(ref.ref.get("url") or "")
        if urlsplit(url).scheme not in ("http", "https"):
            raise PlatformAPIError("the file's src is not an http(s) URL")
        try:
            # The outbound guard refuses internal addresses unless the workspace allows them.
            response = await self.http().get(url)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"Satori file: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"Satori file: {exc}", exc) from exc
        if response.status_code >= 400:
            raise PlatformAPIError(f"Satori file: HTTP {response.status_code}", retryable=response.status_code >= 500)
        mime = ref.mime_type or response.headers.get("content-type", "").split(";")[0]
        return FetchedFile(data=response.content, name=ref.name, mime_type=mime)

    # -- outbound -------------------------------------------------------------------------------
    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        content = elements_of(text)
        if target.reply_to_message_id:
            content = f'<quote id="{html.escape(target.reply_to_message_id, quote=True)}"/>{content}'
        sent = await self.call("message.create", {"channel_id": target.chat_id, "content": content})
        first = sent[0] if isinstance(sent, list) and sent and isinstance(sent[0], dict) else {}
        return SentMessage(chat_id=target.chat_id, message_id=str(first.get("id") or ""))

    async def edit_text(self, message: SentMessage, text: str) -> None:
        body = {"channel_id": message.chat_id, "message_id": message.message_id, "content": elements_of(text)}
        await self.call("message.update", body, idempotent=True)

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        body = {"channel_id": message.chat_id, "message_id": message.message_id, "emoji": reaction}
        await self.call("reaction.create", body, idempotent=True)

    async def identity(self) -> str:
        user = _obj(_obj(await self.call("login.get", {}, idempotent=True)).get("user"))
        name, user_id = user.get("name") or "?", user.get("id") or self.self_id
        return f"the Satori server knows this bot as {name} on {self._value('platform')} (id {user_id})"

    async def webhook_register(self, url: str) -> str:
        await self.identity()
        return "Satori events come over the server's WebSocket (the connector process)"


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _event_time(value: Any) -> float:
    try:
        return float(value) / 1000
    except (TypeError, ValueError):
        return time.time()


class SatoriClosedError(ConnectionClosedError):
    """The connection ended (see `ConnectionClosedError`)."""


class SatoriConnector(PlatformConnector):
    """The bot's event socket: IDENTIFY (with the last `sn`, kept per bot across restarts), READY, PINGs,
    each EVENT of the bot's login handed to `on_update`; reconnects with backoff after a drop."""

    adapter: SatoriAdapter
    ping_interval: ClassVar[float] = 10.0
    pong_timeout: ClassVar[float] = 10.0
    closed_detail: ClassVar[str] = "the server closed the connection"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sn: int | None = None
        self.sessions = 0
        self._saved_sn: int | None = None

    async def run(self) -> None:
        await self.hold(self._session)

    async def _session(self) -> None:
        if self.sn is None:
            adapter = self.adapter
            stored = await cursor_get(adapter.platform, adapter.bot_id, adapter.credentials, CURSOR)
            self.sn = int(stored) if stored.isdigit() else None
            self._saved_sn = self.sn
        url = self.adapter.events_url
        address, port = await socket_address(url, allow_private=self.adapter.allow_private)
        async with websockets.connect(url, max_size=2**22, open_timeout=20, host=address, port=port) as socket:
            self.sessions += 1
            identify: dict[str, Any] = {"token": self.adapter._value("token")}
            if self.sn is not None:
                identify["sn"] = self.sn
            await socket.send(json.dumps({"op": OP.IDENTIFY, "body": identify}))
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
                await socket.send(json.dumps({"op": OP.PING}))
                try:
                    await asyncio.wait_for(ponged.wait(), self.pong_timeout)
                except TimeoutError:
                    await socket.close(1000, "no pong")
                    return

    async def _receive(self, socket: ClientConnection, ponged: asyncio.Event) -> None:
        try:
            async for raw in socket:
                try:
                    frame = json.loads(raw)
                except ValueError:
                    logger.warning("satori bot %s: a frame that is not JSON was ignored", self.adapter.bot_id)
                    continue
                if not isinstance(frame, dict):
                    continue
                op, body = frame.get("op"), frame.get("body")
                if op == OP.READY:
                    self._ready(body if isinstance(body, dict) else {})
                elif op == OP.PONG:
                    ponged.set()
                elif op == OP.EVENT and isinstance(body, dict):
                    await self._event(body)
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            # 3000 is what Satori servers close with for a wrong token: retrying soon cannot help.
            if code in (3000, 4001, 4003):
                raise SatoriClosedError(f"the server refused the token ({code})", fatal=True) from exc
            raise SatoriClosedError(f"the connection closed ({code or 'no close frame'})") from exc
        code = socket.close_code
        if code in (3000, 4001, 4003):
            raise SatoriClosedError(f"the server refused the token ({code})", fatal=True)
        raise SatoriClosedError(f"the connection closed ({code})")

    def _ready(self, body: dict[str, Any]) -> None:
        logins = [item for item in body.get("logins") or () if isinstance(item, dict)]
        named = [
            f"{login.get('platform')}:{(login.get('user') or {}).get('id') or login.get('self_id')}" for login in logins
        ]
        mine = f"{self.adapter._value('platform')}:{self.adapter.self_id}"
        if mine in named:
            self.state, self.detail = "connected", ""
        else:
            # Connected, but this bot's login is not among the server's: say so on the bot's page.
            self.state, self.detail = (
                "connected",
                f"the server has no login {mine} (it has {', '.join(named) or 'none'})",
            )

    async def _event(self, body: dict[str, Any]) -> None:
        sn = body.get("sn", body.get("id"))
        if isinstance(sn, int) and not isinstance(sn, bool):
            self.sn = sn
        try:
            update = self.adapter.event_update(body)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            logger.warning("satori bot %s: an event of the wrong shape was ignored (%s)", self.adapter.bot_id, exc)
            update = None
        if update is not None:
            try:
                await self.on_update(update)
            except Exception:
                # One event that cannot become a gateway event must not drop the bot's connection.
                logger.exception("satori bot %s: an event could not be accepted", self.adapter.bot_id)
        if self.sn is not None and self.sn != self._saved_sn:
            # Kept once the event is handed on: a restart asks the server for the events after it.
            adapter = self.adapter
            await cursor_set(adapter.platform, adapter.bot_id, adapter.credentials, CURSOR, str(self.sn))
            self._saved_sn = self.sn


SatoriAdapter.connector_class = SatoriConnector
