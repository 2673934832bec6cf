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
asking message); in direct messages it answers everything. Other server messages are forwarded with
`data.mentioned: false`, for a binding with `group_always`. Its own messages and other bots' are ignored.
A message the gateway dispatches twice (after a resume) is one gateway event: its `event_id` is the
message's snowflake. Member joins and leaves (with `member_events`), reactions, edits, deletions, the bot
joining a server and clicks on message components are events of their own (docs/platform-events.md);
a slash command is a message, acknowledged at once with a deferred response that the run's reply then
edits (later parts are follow-ups on the interaction's webhook).
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
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.cache import cache
from websockets.asyncio.client import ClientConnection

from foundation.outbound import AddressRefusedError, addresses_refusal, guarded_async_transport, resolve
from platforms.interface import (
    FLAG_PATTERN,
    ConnectionClosedError,
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
    credential_flag,
    inbound_json_object,
    malformed_unless_shaped,
    platform_event_envelope,
    transport_failure,
)

logger = logging.getLogger(__name__)

DEFAULT_API_BASE_URL = "https://discord.com/api/v10"
GATEWAY_VERSION = 10
# GUILDS | GUILD_MESSAGES | GUILD_MESSAGE_REACTIONS | DIRECT_MESSAGES | DIRECT_MESSAGE_REACTIONS |
# MESSAGE_CONTENT (the last is privileged: enabled in the portal).
INTENTS = (1 << 0) | (1 << 9) | (1 << 10) | (1 << 12) | (1 << 13) | (1 << 15)
# GUILD_MEMBERS, privileged too: asked for only when the bot's `member_events` is on, since the gateway
# closes the connection (4014) when a bot asks for an intent its portal page does not grant.
MEMBERS_INTENT = 1 << 1
# Interaction types (APPLICATION_COMMAND, MESSAGE_COMPONENT) and the callback types answering them within
# Discord's 3 seconds: a deferred channel message (the "thinking…" the run's reply replaces) and a
# deferred update (the click acknowledged, nothing shown).
INTERACTION_PING = 1
CALLBACK_PONG = 1
INTERACTION_COMMAND = 2
INTERACTION_COMPONENT = 3
CALLBACK_DEFERRED_MESSAGE = 5
CALLBACK_DEFERRED_UPDATE = 6
# A reply target's chat naming an interaction's webhook instead of a channel: `interaction:<app>:<token>`.
INTERACTION_CHAT_PREFIX = "interaction:"
REQUEST_TIMEOUT = 30.0
# Gateway close codes after which reconnecting cannot help (bad token, intents not enabled or not allowed).
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})
CDN_HOSTS = ("discordapp.com", "discordapp.net", "discord.com")
# How long an interaction's token lets the bot write (Discord: 15 minutes).
INTERACTION_TOKEN_SECONDS = 15 * 60
# A signed interaction older than this is refused (a captured request replayed later).
REPLAY_WINDOW_SECONDS = 5 * 60


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
        event_types=(
            "member.joined",
            "member.left",
            "reaction.added",
            "reaction.removed",
            "message.recalled",
            "message.edited",
            "card.clicked",
            "bot.added",
        ),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("token", "api_base_url", "member_events", "public_key")
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
        CredentialField(
            "public_key",
            help="Optional: the application's Public Key (Developer Portal → General Information), to take "
            "slash commands and button clicks at this bot's webhook URL set as the Interactions Endpoint URL; "
            "without it they come over the gateway.",
            link="https://discord.com/developers/applications",
            pattern=r"^[0-9a-fA-F]{64}$",
            pattern_hint="64 hexadecimal digits",
        ),
        CredentialField(
            "member_events",
            types=("boolean", "string"),
            pattern=FLAG_PATTERN,
            pattern_hint="yes or no (true/false)",
            help="Optional (default off): deliver member joins and leaves. Turn on the Server Members intent "
            "on the Developer Portal's Bot page first: without it Discord refuses the connection.",
        ),
    )
    connector_class: ClassVar[type[PlatformConnector] | None] = None  # set below the connector's class
    connection_kinds: ClassVar[tuple[str, ...]] = (
        "gateway WebSocket (connector process)",
        "webhook (interactions, with public_key)",
    )

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
        """Only interactions come by webhook (the application's Interactions Endpoint URL), signed with
        Ed25519 (`X-Signature-Ed25519` over `X-Signature-Timestamp` + the body) by the application's
        public key; messages arrive over the gateway."""
        public_key = str(self.credentials.get("public_key") or "")
        if not public_key:
            raise InboundRefusedError(
                "malformed",
                "Discord messages arrive over the gateway; interactions need the bot's public_key",
                status=404,
            )
        signature, timestamp = request.header("x-signature-ed25519"), request.header("x-signature-timestamp")
        if not signature or not timestamp:
            raise InboundRefusedError("forged", "the interaction is not signed", status=401)
        try:
            key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key))
            key.verify(bytes.fromhex(signature), timestamp.encode() + request.body)
        except (ValueError, InvalidSignature):
            raise InboundRefusedError("forged", "the Discord signature does not match", status=401) from None
        try:
            age = abs(time.time() - int(timestamp))
        except (ValueError, OverflowError):
            raise InboundRefusedError("forged", "the signature timestamp is not a number", status=401) from None
        if age > REPLAY_WINDOW_SECONDS:
            raise InboundRefusedError("replayed", "the interaction was signed more than five minutes ago", status=401)

    def parse(self, request: InboundRequest) -> InboundBatch:
        """A verified interaction: Discord's endpoint check (PING) answered PONG; a slash command answered
        with a deferred response and a component click with a deferred update in the webhook's own answer
        (Discord's 3 seconds), the update handed on as over the gateway."""
        interaction = inbound_json_object(request.body, what="not a Discord interaction")
        with malformed_unless_shaped("not a Discord interaction"):
            kind = interaction.get("type")
            if kind == INTERACTION_PING:
                return InboundBatch(response={"type": CALLBACK_PONG})
            update = self.interaction_update(interaction)
        if update is None:
            raise InboundRefusedError("malformed", "not an interaction this bot takes", status=400)
        answer = CALLBACK_DEFERRED_MESSAGE if kind == INTERACTION_COMMAND else CALLBACK_DEFERRED_UPDATE
        return InboundBatch(updates=[update], response={"type": answer})

    def intents(self) -> int:
        return INTENTS | (MEMBERS_INTENT if credential_flag(self.credentials.get("member_events")) else 0)

    def event_update(
        self, kind: str, data: dict[str, Any], *, bot_user_id: str, delivery: str, system_channels: dict[str, str]
    ) -> InboundUpdate | None:
        """The update of a dispatch that is an event beyond messages (docs/platform-events.md), or None.
        `delivery` names the dispatch within its gateway session (a resumed session sends it again with
        the same name); `system_channels` is where a server's member events are answered (its system
        channel, from GUILD_CREATE): a server without one gets no member events."""
        event_id = f"discord:{self.bot_id}:{delivery}"
        common: dict[str, Any] = {"source_event_type": kind, "raw": data, "event_time": time.time()}
        if kind in ("GUILD_MEMBER_ADD", "GUILD_MEMBER_REMOVE"):
            user = data.get("user") or {}
            guild = str(data.get("guild_id") or "")
            channel = system_channels.get(guild)
            if not channel or not user.get("id") or user.get("bot"):
                return None
            envelope = platform_event_envelope(
                event_id=event_id,
                event_type="member.joined" if kind == "GUILD_MEMBER_ADD" else "member.left",
                chat_id=channel,
                chat_type="guild",
                actor_id=str(user["id"]),
                actor_name=user.get("global_name") or user.get("username"),
                extra={"guild_id": guild},
                **common,
            )
        elif kind in ("MESSAGE_REACTION_ADD", "MESSAGE_REACTION_REMOVE"):
            user = str(data.get("user_id") or "")
            if not user or user == bot_user_id or not data.get("channel_id") or not data.get("message_id"):
                return None
            emoji = data.get("emoji") or {}
            # A custom emoji by its name and id (how the API names it back), a Unicode one as itself.
            name = f"{emoji.get('name')}:{emoji['id']}" if emoji.get("id") else str(emoji.get("name") or "")
            envelope = platform_event_envelope(
                event_id=event_id,
                event_type="reaction.added" if kind == "MESSAGE_REACTION_ADD" else "reaction.removed",
                chat_id=str(data["channel_id"]),
                chat_type="guild" if data.get("guild_id") else "dm",
                actor_id=user,
                target_message_id=str(data["message_id"]),
                reaction=name,
                **common,
            )
        elif kind == "MESSAGE_UPDATE":
            author = data.get("author") or {}
            content = str(data.get("content") or "")
            # Discord sends MESSAGE_UPDATE for embeds unfurling too; only an edit has `edited_timestamp`.
            if not data.get("edited_timestamp") or not author or author.get("bot") or not data.get("channel_id"):
                return None
            mentioned = any(str(m.get("id")) == bot_user_id for m in data.get("mentions") or () if isinstance(m, dict))
            text = re.sub(rf"<@!?{re.escape(bot_user_id)}>", "", content).strip() if bot_user_id else content
            if not text:
                return None
            envelope = platform_event_envelope(
                event_id=f"discord:{self.bot_id}:{data.get('id')}:edited:{data['edited_timestamp']}",
                event_type="message.edited",
                chat_id=str(data["channel_id"]),
                chat_type="guild" if data.get("guild_id") else "dm",
                actor_id=str(author.get("id") or "") or None,
                actor_name=author.get("global_name") or author.get("username"),
                target_message_id=str(data.get("id") or "") or None,
                text=text,
                extra={"mentioned": mentioned or not data.get("guild_id")},
                **common,
            )
        elif kind == "MESSAGE_DELETE":
            if not data.get("channel_id") or not data.get("id"):
                return None
            envelope = platform_event_envelope(
                event_id=f"discord:{self.bot_id}:{data['id']}:deleted",
                event_type="message.recalled",
                chat_id=str(data["channel_id"]),
                chat_type="guild" if data.get("guild_id") else "dm",
                target_message_id=str(data["id"]),
                **common,
            )
        elif kind == "GUILD_CREATE":
            channel = str(data.get("system_channel_id") or "")
            if not channel:
                return None
            envelope = platform_event_envelope(
                event_id=f"discord:{self.bot_id}:guild:{data.get('id')}:{data.get('joined_at') or ''}",
                event_type="bot.added",
                chat_id=channel,
                chat_type="guild",
                extra={"guild_id": str(data.get("id") or ""), "guild_name": str(data.get("name") or "")},
                **common,
            )
        else:
            return None
        return InboundUpdate(envelope=envelope)

    def interaction_update(self, interaction: dict[str, Any]) -> InboundUpdate | None:
        """A slash command (→ `message.received`, answered through the interaction's webhook) or a click on
        a message component (→ `card.clicked`); None for other interactions."""
        kind = interaction.get("type")
        channel = str(interaction.get("channel_id") or (interaction.get("channel") or {}).get("id") or "")
        user = (interaction.get("member") or {}).get("user") or interaction.get("user") or {}
        if not channel or not interaction.get("id") or not interaction.get("token"):
            return None
        in_guild = bool(interaction.get("guild_id"))
        event_id = f"discord:{self.bot_id}:interaction:{interaction['id']}"
        raw = {k: v for k, v in interaction.items() if k != "token"}
        data = interaction.get("data") or {}
        webhook = ReplyTarget(
            chat_id=f"{INTERACTION_CHAT_PREFIX}{interaction.get('application_id')}:{interaction['token']}",
            extra={"channel_id": channel},
        )
        if kind == INTERACTION_COMMAND:
            name = str(data.get("name") or "")
            options = " ".join(
                str(o.get("value")) for o in data.get("options") or () if isinstance(o, dict) and "value" in o
            )
            text = f"/{name} {options}".strip()
            return InboundUpdate(
                envelope={
                    "event_id": event_id,
                    "event_type": "message.received",
                    "source_event_type": "INTERACTION_CREATE",
                    "actor": {
                        "actor_type": "user",
                        "actor_id": str(user.get("id") or "") or None,
                        "metadata": {"username": str(user.get("username") or "")},
                    },
                    "subject": {"subject_type": "command", "subject_id": str(interaction["id"])},
                    "input": {"text": text},
                    "data": {
                        "chat_id": channel,
                        "chat_type": "guild" if in_guild else "dm",
                        "command": name,
                        "mentioned": True,
                        "reply_target": webhook.as_data(),
                        "raw": raw,
                    },
                    "event_time": time.time(),
                }
            )
        if kind == INTERACTION_COMPONENT:
            message = interaction.get("message") or {}
            action = {"custom_id": data.get("custom_id"), "component_type": data.get("component_type")}
            if data.get("values") is not None:
                action["values"] = data.get("values")
            return InboundUpdate(
                envelope=platform_event_envelope(
                    event_id=event_id,
                    event_type="card.clicked",
                    source_event_type="INTERACTION_CREATE",
                    chat_id=channel,
                    chat_type="guild" if in_guild else "dm",
                    actor_id=str(user.get("id") or "") or None,
                    actor_name=user.get("global_name") or user.get("username"),
                    target_message_id=str(message.get("id") or "") or None,
                    action=action,
                    raw=raw,
                    event_time=time.time(),
                )
            )
        return None

    async def interaction_ack(self, interaction: dict[str, Any]) -> None:
        """Answer an interaction within Discord's 3 seconds: a command with a deferred message (the run's
        reply then edits it), a component click with a deferred update."""
        kind = interaction.get("type")
        if kind not in (INTERACTION_COMMAND, INTERACTION_COMPONENT):
            return
        answer = CALLBACK_DEFERRED_MESSAGE if kind == INTERACTION_COMMAND else CALLBACK_DEFERRED_UPDATE
        await self.request(
            "POST", f"/interactions/{interaction['id']}/{interaction['token']}/callback", json={"type": answer}
        )

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
        # A server message that does not address the bot is forwarded with `data.mentioned: false` (its text
        # arrives only with the MESSAGE_CONTENT intent): the binding's trigger policy decides (`group_always`).
        addressed = not in_guild or mentioned or replied_to_bot
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
                    "mentioned": addressed,
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
    @staticmethod
    def _interaction_webhook(chat_id: str) -> str | None:
        """The webhook path of an interaction reply target (`interaction:<app>:<token>`), else None."""
        if not chat_id.startswith(INTERACTION_CHAT_PREFIX):
            return None
        app, _, token = chat_id[len(INTERACTION_CHAT_PREFIX) :].partition(":")
        return f"/webhooks/{quote(app, safe='')}/{quote(token, safe='')}"

    def mention_markup(self, actor: dict[str, Any]) -> str | None:
        user = str(actor.get("actor_id") or "")
        return f"<@{user}>" if user.isdigit() else None

    @staticmethod
    def _mentioned_first(text: str) -> list[str]:
        """The user a reply starts by mentioning (`mention_markup`): the one mention Discord may notify."""
        match = re.match(r"<@(\d{1,20})> ", text)
        return [match.group(1)] if match else []

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        webhook = self._interaction_webhook(target.chat_id)
        if webhook is not None:
            # The first write replaces the deferred response's "thinking…"; later ones are follow-ups.
            # The cache is shared by the workers, so two writers agree which one was first.
            first = await cache.aadd(f"platforms:discord:interaction:{webhook}", 1, timeout=INTERACTION_TOKEN_SECONDS)
            answer = {"content": text, "allowed_mentions": {"parse": []}}
            if first:
                sent = await self.request("PATCH", f"{webhook}/messages/@original", json=answer)
            else:
                sent = await self.request("POST", f"{webhook}?wait=true", json=answer)
            return SentMessage(chat_id=target.chat_id, message_id=str(sent["id"]))
        body: dict[str, Any] = {
            "content": text,
            "allowed_mentions": {"parse": [], "users": self._mentioned_first(text)},
        }
        if target.reply_to_message_id:
            body["message_reference"] = {"message_id": target.reply_to_message_id, "fail_if_not_exists": False}
        sent = await self.request("POST", f"/channels/{target.chat_id}/messages", json=body)
        return SentMessage(chat_id=str(sent.get("channel_id") or target.chat_id), message_id=str(sent["id"]))

    async def edit_text(self, message: SentMessage, text: str) -> None:
        webhook = self._interaction_webhook(message.chat_id)
        if webhook is not None:
            await self.request("PATCH", f"{webhook}/messages/{message.message_id}", json={"content": text})
            return
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


class GatewayClosedError(ConnectionClosedError):
    """The connection ended (see `ConnectionClosedError`)."""


class DiscordConnector(PlatformConnector):
    """The bot's gateway session: HELLO, IDENTIFY (or RESUME after a drop), heartbeats, READY, and each
    MESSAGE_CREATE handed to `on_update`. A dropped connection, a missed heartbeat ACK or the gateway's
    RECONNECT start the next session after the backoff; a session that reached READY resets the backoff."""

    adapter: DiscordAdapter
    closed_detail: ClassVar[str] = "the gateway closed the connection"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bot_user_id = ""
        self.sequence: int | None = None
        self.session_id = ""
        self.resume_url = ""
        self.sessions = 0
        # Servers the session knows (READY lists them, each GUILD_CREATE then fills one in: one not listed
        # is a server that added the bot) and their system channels, where member events are answered.
        self.guilds: set[str] = set()
        self.system_channels: dict[str, str] = {}

    async def run(self) -> None:
        await self.hold(self._session)

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
                "intents": self.adapter.intents(),
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
            self.guilds = {str(g.get("id")) for g in data.get("guilds") or () if isinstance(g, dict)}
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
        elif kind == "INTERACTION_CREATE":
            await self._interaction(data)
        elif self.bot_user_id:
            if kind == "GUILD_CREATE":
                guild = str(data.get("id") or "")
                if data.get("system_channel_id"):
                    self.system_channels[guild] = str(data["system_channel_id"])
                if guild in self.guilds:
                    return  # a server the bot was in already, becoming available
                self.guilds.add(guild)
            update = self.adapter.event_update(
                kind,
                data,
                bot_user_id=self.bot_user_id,
                delivery=f"{self.session_id}:{self.sequence}",
                system_channels=self.system_channels,
            )
            if update is not None:
                await self._hand_on(update)

    async def _interaction(self, data: dict[str, Any]) -> None:
        update = self.adapter.interaction_update(data)
        try:
            await self.adapter.interaction_ack(data)
        except PlatformAPIError as exc:
            # Unanswered, Discord shows the user that the interaction failed; the event is still taken.
            logger.warning("discord bot %s: an interaction could not be answered: %s", self.adapter.bot_id, exc)
        if update is not None:
            await self._hand_on(update)

    async def _hand_on(self, update: InboundUpdate) -> None:
        try:
            await self.on_update(update)
        except Exception:
            logger.exception("discord bot %s: an event could not be accepted", self.adapter.bot_id)


DiscordAdapter.connector_class = DiscordConnector
