"""Discord: the gateway (a WebSocket the connector process holds) in, the REST API out — messages created
and edited (`POST` / `PATCH channels/{id}/messages`), reactions, attachments both ways.

Credentials: `token` (the bot token from the Developer Portal; the bot needs the Message Content intent),
optional `api_base_url` (the REST API's base, default `https://discord.com/api/v10`; a proxy). The gateway's
address is what the API's `GET /gateway/bot` answers, so `api_base_url` points both at a proxy or a fake.

Written on `websockets` and httpx rather than discord.py: discord.py keeps its REST base
(`discord.http.Route.BASE`) and its gateway (`DiscordWebSocket.DEFAULT_GATEWAY`) as process-wide class
attributes, so two bots with different `api_base_url`s cannot live in one connector process, and its
client caches guilds and members the host never uses.

In servers the bot answers messages that mention it or reply to one of its messages (as a reply to the
asking message); in direct messages it answers everything. Its own messages and other bots' are ignored.
A message the gateway dispatches twice (after a resume) is one gateway event: its `event_id` is the
message's snowflake.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import time
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from foundation.outbound import AddressRefusedError, addresses_refusal, guarded_async_transport, resolve
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
    transport_failure,
)

logger = logging.getLogger(__name__)

DEFAULT_API_BASE_URL = "https://discord.com/api/v10"
GATEWAY_VERSION = 10
# GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT (the last is privileged: enabled in the portal).
INTENTS = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
REQUEST_TIMEOUT = 30.0
# Gateway close codes after which reconnecting cannot help (bad token, intents not enabled or not allowed).
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})
CDN_HOSTS = ("discordapp.com", "discordapp.net", "discord.com")


class OP:
    DISPATCH = 0
    HEARTBEAT = 1
    IDENTIFY = 2
    RESUME = 6
    RECONNECT = 7
    INVALID_SESSION = 9
    HELLO = 10
    HEARTBEAT_ACK = 11


def _file_kind(mime_type: str) -> str:
    head = mime_type.split("/", 1)[0]
    return head if head in ("image", "audio", "video") else "file"


def _retry_after(response: httpx.Response) -> float:
    try:
        body = response.json()
        if isinstance(body, dict) and body.get("retry_after") is not None:
            return max(0.0, float(body["retry_after"]))
    except ValueError:
        pass
    try:
        return max(0.0, float(response.headers.get("retry-after") or 1))
    except ValueError:
        return 1.0


class DiscordUnauthorizedError(PlatformAPIError):
    """Discord refused the bot's token."""


class DiscordAdapter(PlatformAdapter):
    platform: ClassVar[str] = "discord"
    # 2000 characters is Discord's limit on a message's content; a channel takes about five messages
    # (or edits) per five seconds from a bot, so one write a second keeps clear of its 429s.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=True,
        threads=False,
        max_message_chars=2000,
        edit_interval_seconds=1.0,
        max_file_bytes=10 * 1024 * 1024,
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("token", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "token",
            required=True,
            secret=True,
            help="The bot's token: Developer Portal → the application → Bot → Reset Token. Turn on the "
            "Message Content intent on the same page.",
            link="https://discord.com/developers/applications",
        ),
        CredentialField("api_base_url", help="Optional: the REST API's origin (default https://discord.com/api/v10)."),
    )
    connector_class: ClassVar[type[PlatformConnector] | None] = None  # set below the connector's class

    _http: httpx.AsyncClient | None = None

    @property
    def token(self) -> str:
        return str(self.credentials.get("token") or "")

    @property
    def base_url(self) -> str:
        return self.api_base_url or DEFAULT_API_BASE_URL

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            if not self.token:
                raise PlatformAPIError("the bot has no Discord token (credentials.token)")
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                # Through the outbound address guard; no proxy from the environment.
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=REQUEST_TIMEOUT,
                headers={
                    "Authorization": f"Bot {self.token}",
                    "User-Agent": "DiscordBot (https://github.com/langbot-app, 1) LangBotHost",
                },
            )
        return self._http

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One REST call; Discord's errors as `PlatformAPIError` (429 with its `retry_after`)."""
        try:
            response = await self.http().request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise transport_failure(f"Discord {method} {path}: {exc}", exc) from exc
        except AddressRefusedError as exc:  # api_base_url's address, refused by the outbound guard: final
            raise PlatformAPIError(f"Discord {method} {path}: refused: {exc}") from exc
        if response.status_code == 429:
            raise PlatformAPIError(f"Discord {method} {path}: rate limited", retry_after=_retry_after(response))
        if response.status_code == 401:
            raise DiscordUnauthorizedError(f"Discord {method} {path}: HTTP 401, the token was refused")
        if response.status_code >= 400:
            try:
                detail = response.json().get("message") or response.text
            except (ValueError, AttributeError):
                detail = response.text
            # A 5xx (Discord's own or its proxy's) does not say whether the message was created.
            raise PlatformAPIError(
                f"Discord {method} {path}: HTTP {response.status_code} {str(detail)[:200]}",
                retryable=response.status_code >= 500,
                outcome_unknown=response.status_code >= 500,
            )
        return response.json() if response.content else None

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        raise InboundRefusedError("malformed", "Discord messages arrive over the gateway, not a webhook", status=404)

    def parse(self, request: InboundRequest) -> InboundBatch:  # pragma: no cover - verify refuses first
        return InboundBatch()

    def message_update(self, message: dict[str, Any], *, bot_user_id: str) -> InboundUpdate | None:
        """The update of a MESSAGE_CREATE dispatch, or None when it is not for the bot."""
        author = message.get("author") or {}
        if not isinstance(author, dict) or author.get("bot") or str(author.get("id")) == bot_user_id:
            return None
        if message.get("webhook_id") or not message.get("channel_id") or not message.get("id"):
            return None
        in_guild = bool(message.get("guild_id"))
        mentioned = any(str(m.get("id")) == bot_user_id for m in message.get("mentions") or () if isinstance(m, dict))
        referenced = message.get("referenced_message")
        replied_to_bot = isinstance(referenced, dict) and str((referenced.get("author") or {}).get("id")) == bot_user_id
        if in_guild and not (mentioned or replied_to_bot):
            return None
        text = re.sub(rf"<@!?{re.escape(bot_user_id)}>", "", str(message.get("content") or "")).strip()
        files = [
            PlatformFileRef(
                ref={"attachment_id": str(a.get("id") or ""), "url": str(a["url"])},
                name=str(a.get("filename") or "attachment"),
                mime_type=str(a.get("content_type") or ""),
                size=a.get("size") if isinstance(a.get("size"), int) else None,
                kind=_file_kind(str(a.get("content_type") or "")),
            )
            for a in message.get("attachments") or ()
            if isinstance(a, dict) and a.get("url")
        ]
        if not text and not files:
            return None
        channel = str(message["channel_id"])
        target = ReplyTarget(chat_id=channel, reply_to_message_id=str(message["id"]) if in_guild else None)
        chat_type = "guild" if in_guild else "dm"
        return InboundUpdate(
            envelope={
                "event_id": f"discord:{self.bot_id}:{message['id']}",
                "event_type": "message.received",
                "source_event_type": "MESSAGE_CREATE",
                "actor": {
                    "actor_type": "user",
                    "actor_id": str(author.get("id")),
                    "metadata": {"username": str(author.get("username") or "")},
                },
                "subject": {
                    "subject_type": "message",
                    "subject_id": str(message["id"]),
                    "data": {"guild_id": message.get("guild_id"), "chat_type": chat_type},
                },
                "input": {"text": text or None},
                "data": {
                    "chat_id": channel,
                    "chat_type": chat_type,
                    "reply_target": target.as_data(),
                    "raw": message,
                },
                "event_time": time.time(),
            },
            files=files,
        )

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        url = str(ref.ref.get("url") or "")
        host = (urlsplit(url).hostname or "").lower()
        own = self.api_base_url and host == (urlsplit(self.api_base_url).hostname or "").lower()
        if not own and not (url.startswith("https://") and any(host == h or host.endswith(f".{h}") for h in CDN_HOSTS)):
            raise PlatformAPIError(f"refusing to fetch an attachment from {host or 'nowhere'}")
        try:
            # The api_base_url override (a credential) may name any host: the outbound guard keeps the download
            # off the host's internal addresses unless an operator allowed them.
            async with httpx.AsyncClient(
                timeout=60.0,
                follow_redirects=False,
                trust_env=False,
                transport=guarded_async_transport(allow_private=self.allow_private),
            ) as http:
                response = await http.get(url)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"the file's address is refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise PlatformAPIError(f"fetching a Discord attachment failed: {exc}", retryable=True) from exc
        if response.status_code == 429:
            raise PlatformAPIError("Discord rate-limited an attachment download", retry_after=_retry_after(response))
        if response.status_code != 200:
            raise PlatformAPIError(f"Discord did not give the attachment (HTTP {response.status_code})")
        return FetchedFile(data=response.content, name=ref.name, mime_type=ref.mime_type)

    # -- outbound -------------------------------------------------------------------------------
    def mention_markup(self, actor: dict[str, Any]) -> str | None:
        user = str(actor.get("actor_id") or "")
        return f"<@{user}>" if user.isdigit() else None

    @staticmethod
    def _mentioned_first(text: str) -> list[str]:
        """The user a reply starts by mentioning (`mention_markup`): the one mention Discord may notify."""
        match = re.match(r"<@(\d{1,20})> ", text)
        return [match.group(1)] if match else []

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        body: dict[str, Any] = {
            "content": text,
            "allowed_mentions": {"parse": [], "users": self._mentioned_first(text)},
        }
        if target.reply_to_message_id:
            body["message_reference"] = {"message_id": target.reply_to_message_id, "fail_if_not_exists": False}
        sent = await self.request("POST", f"/channels/{target.chat_id}/messages", json=body)
        return SentMessage(chat_id=str(sent.get("channel_id") or target.chat_id), message_id=str(sent["id"]))

    async def edit_text(self, message: SentMessage, text: str) -> None:
        await self.request(
            "PATCH", f"/channels/{message.chat_id}/messages/{message.message_id}", json={"content": text}
        )

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        payload: dict[str, Any] = {
            "content": file.caption,
            "attachments": [{"id": 0, "filename": file.name}],
            "allowed_mentions": {"parse": []},
        }
        if target.reply_to_message_id:
            payload["message_reference"] = {"message_id": target.reply_to_message_id, "fail_if_not_exists": False}
        sent = await self.request(
            "POST",
            f"/channels/{target.chat_id}/messages",
            data={"payload_json": json.dumps(payload)},
            files={"files[0]": (file.name, file.data, file.mime_type or "application/octet-stream")},
        )
        return SentMessage(chat_id=str(sent.get("channel_id") or target.chat_id), message_id=str(sent["id"]))

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        emoji = quote(reaction.strip(":"), safe="")
        await self.request("PUT", f"/channels/{message.chat_id}/messages/{message.message_id}/reactions/{emoji}/@me")

    async def identity(self) -> str:
        me = await self.request("GET", "/users/@me")
        return f"Discord knows this bot as {me.get('username') or '?'} (id {me.get('id') or '?'})"

    async def webhook_register(self, url: str) -> str:
        """Discord needs no webhook: checks the token and says that the connector process carries messages."""
        me = await self.request("GET", "/users/@me")
        return f"{me.get('username') or 'the bot'}: Discord messages come over the gateway (the connector process)"

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()


class GatewayClosedError(Exception):
    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class DiscordConnector(PlatformConnector):
    """The bot's gateway session: HELLO, IDENTIFY (or RESUME after a drop), heartbeats, READY, and each
    MESSAGE_CREATE handed to `on_update`. A dropped connection, a missed heartbeat ACK or the gateway's
    RECONNECT start the next session after the backoff; a session that reached READY resets the backoff."""

    adapter: DiscordAdapter
    reconnect_first_delay: ClassVar[float] = 1.0
    # A bad token or disallowed intents cannot heal by retrying fast; retried at the backoff's cap.
    fatal_retry_delay: ClassVar[float] = 300.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bot_user_id = ""
        self.sequence: int | None = None
        self.session_id = ""
        self.resume_url = ""
        self.sessions = 0

    async def run(self) -> None:
        delays = self.backoff_delays(self.reconnect_first_delay)
        try:
            while True:
                self.state, self.detail = "connecting", ""
                try:
                    await self._session()
                    detail = "the gateway closed the connection"
                except GatewayClosedError as exc:
                    if exc.fatal:
                        self.state, self.detail = "error", str(exc)
                        logger.error("discord bot %s: %s", self.adapter.bot_id, exc)
                        await asyncio.sleep(self.fatal_retry_delay)
                        continue
                    detail = str(exc)
                except (OSError, TimeoutError, websockets.WebSocketException, PlatformAPIError, ValueError) as exc:
                    detail = f"{type(exc).__name__}: {exc}"
                if self.state == "connected":
                    delays = self.backoff_delays(self.reconnect_first_delay)
                delay = next(delays)
                logger.warning("discord bot %s: %s; reconnecting in %.1fs", self.adapter.bot_id, detail, delay)
                await self.sleep_backoff(delay, detail)
        finally:
            self.state = "stopped"
            await self.adapter.aclose()

    async def _gateway_address(self, url: str) -> tuple[str, int]:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "wss" else 80)
        try:
            addresses = await asyncio.to_thread(resolve, host, port)
        except (OSError, UnicodeError) as exc:
            raise GatewayClosedError(f"the gateway host {host} does not resolve: {exc}") from exc
        refusal = None if self.adapter.allow_private else addresses_refusal(host, addresses)
        if refusal is not None or not addresses:
            raise GatewayClosedError(f"the gateway address is refused: {refusal or 'no address'}", fatal=True)
        return addresses[0], port

    async def _gateway_url(self) -> str:
        if self.resume_url and self.session_id:
            return self.resume_url
        try:
            data = await self.adapter.request("GET", "/gateway/bot")
        except DiscordUnauthorizedError as exc:
            raise GatewayClosedError(str(exc), fatal=True) from exc
        return str(data["url"])

    async def _session(self) -> None:
        url = (await self._gateway_url()).rstrip("/")
        # The gateway's address comes from the API's answer: the socket connects only to an address the
        # outbound guard checked (TLS and the Host header still name the URL's host).
        address, port = await self._gateway_address(url)
        async with websockets.connect(
            f"{url}/?v={GATEWAY_VERSION}&encoding=json", max_size=None, open_timeout=20, host=address, port=port
        ) as socket:
            self.sessions += 1
            hello = json.loads(await asyncio.wait_for(socket.recv(), timeout=20))
            if hello.get("op") != OP.HELLO:
                raise GatewayClosedError(f"the gateway did not say HELLO (op {hello.get('op')})")
            interval = float(hello["d"]["heartbeat_interval"]) / 1000
            acked = asyncio.Event()
            acked.set()
            beat = asyncio.create_task(self._heartbeat(socket, interval, acked))
            try:
                await socket.send(json.dumps(self._hello_answer()))
                await self._receive(socket, acked, beat)
            finally:
                beat.cancel()

    def _hello_answer(self) -> dict[str, Any]:
        token = self.adapter.token
        if self.session_id and self.sequence is not None:
            return {"op": OP.RESUME, "d": {"token": token, "session_id": self.session_id, "seq": self.sequence}}
        return {
            "op": OP.IDENTIFY,
            "d": {
                "token": token,
                "intents": INTENTS,
                "properties": {"os": "linux", "browser": "langbot-host", "device": "langbot-host"},
            },
        }

    async def _heartbeat(self, socket: ClientConnection, interval: float, acked: asyncio.Event) -> None:
        await asyncio.sleep(interval * random.random())
        # A closed socket ends the beats; the receiving side reports why.
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                if not acked.is_set():
                    # A zombied connection: close it so the session starts over (resuming).
                    await socket.close(4000, "heartbeat not acknowledged")
                    return
                acked.clear()
                await socket.send(json.dumps({"op": OP.HEARTBEAT, "d": self.sequence}))
                await asyncio.sleep(interval)

    async def _receive(self, socket: ClientConnection, acked: asyncio.Event, beat: asyncio.Task[None]) -> None:
        try:
            async for raw in socket:
                frame = json.loads(raw)
                op = frame.get("op")
                if frame.get("s") is not None:
                    self.sequence = int(frame["s"])
                if op == OP.DISPATCH:
                    await self._dispatch(str(frame.get("t")), frame.get("d") or {})
                elif op == OP.HEARTBEAT:
                    await socket.send(json.dumps({"op": OP.HEARTBEAT, "d": self.sequence}))
                elif op == OP.HEARTBEAT_ACK:
                    acked.set()
                elif op == OP.RECONNECT:
                    raise GatewayClosedError("the gateway asked to reconnect")
                elif op == OP.INVALID_SESSION:
                    if not frame.get("d"):
                        self.session_id, self.resume_url, self.sequence = "", "", None
                    raise GatewayClosedError("the gateway invalidated the session")
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            if code in FATAL_CLOSE_CODES:
                reason = exc.rcvd.reason if exc.rcvd is not None else ""
                raise GatewayClosedError(f"the gateway closed with {code} {reason}".strip(), fatal=True) from exc
            raise GatewayClosedError(f"the connection closed ({code or 'no close frame'})") from exc
        code = socket.close_code
        if code in FATAL_CLOSE_CODES:
            raise GatewayClosedError(f"the gateway closed with {code} {socket.close_reason}".strip(), fatal=True)
        raise GatewayClosedError(f"the connection closed ({code})")

    async def _dispatch(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "READY":
            self.bot_user_id = str((data.get("user") or {}).get("id") or "")
            self.session_id = str(data.get("session_id") or "")
            self.resume_url = str(data.get("resume_gateway_url") or "")
            self.state, self.detail = "connected", ""
        elif kind == "RESUMED":
            self.state, self.detail = "connected", ""
        elif kind == "MESSAGE_CREATE" and self.bot_user_id:
            update = self.adapter.message_update(data, bot_user_id=self.bot_user_id)
            if update is not None:
                try:
                    await self.on_update(update)
                except Exception:
                    # One message that cannot become an event must not drop the bot's connection.
                    logger.exception("discord bot %s: a message could not be accepted", self.adapter.bot_id)


DiscordAdapter.connector_class = DiscordConnector
