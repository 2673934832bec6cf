"""What the connectors of KOOK, Matrix and Satori share: the address a WebSocket may connect to (checked by
the outbound guard, since the URL comes from a tenant's credentials or from the platform's answer), the
durable cursor a connector keeps per bot (`PlatformCursor`) so that a restart neither replays nor skips,
and the envelope of an event that is not a message (the pinned `PLATFORM_EVENT_TYPES`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async

from bindings.models import Bot
from foundation.outbound import addresses_refusal, resolve
from platforms.interface import ConnectionClosedError, InboundUpdate, ReplyTarget, platform_event_envelope


class SocketRefusedError(ConnectionClosedError):
    """The socket's address may not be connected to (or does not resolve). `fatal` when retrying soon
    cannot help (the outbound guard refused it)."""


async def socket_address(url: str, *, allow_private: bool) -> tuple[str, int]:
    """The checked address and port a `ws://`/`wss://` URL connects to: the socket is opened on that
    address (TLS and the Host header still name the URL's host), so a name resolving elsewhere in
    between cannot lead it to an internal address."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise SocketRefusedError(f"not a WebSocket URL: {url[:200]!r}", fatal=True)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    try:
        addresses = await asyncio.to_thread(resolve, host, port)
    except (OSError, UnicodeError) as exc:
        raise SocketRefusedError(f"the host {host} does not resolve: {exc}") from exc
    refusal = None if allow_private else addresses_refusal(host, addresses)
    if refusal is not None or not addresses:
        raise SocketRefusedError(f"the address is refused: {refusal or 'no address'}", fatal=True)
    return addresses[0], port


def _bot_of(platform: str, bot_id: str, credentials: dict[str, Any]) -> Bot | None:
    # The connector knows its bot by id and credentials only (bot ids are unique per workspace): the
    # enabled bot with exactly these credentials is the one whose connection this is.
    for bot in Bot.objects.filter(platform=platform, bot_id=bot_id).order_by("pk"):
        if (bot.credentials or {}) == credentials:
            return bot
    return None


def _cursor_get(platform: str, bot_id: str, credentials: dict[str, Any], name: str) -> str:
    from platforms.models import PlatformCursor

    bot = _bot_of(platform, bot_id, credentials)
    if bot is None:
        return ""
    found = PlatformCursor.objects.filter(bot=bot, name=name).values_list("value", flat=True).first()
    return found or ""


def _cursor_set(platform: str, bot_id: str, credentials: dict[str, Any], name: str, value: str) -> None:
    from platforms.models import PlatformCursor

    bot = _bot_of(platform, bot_id, credentials)
    if bot is not None:
        PlatformCursor.objects.update_or_create(bot=bot, name=name, defaults={"value": value})


cursor_get = database_sync_to_async(_cursor_get)
cursor_set = database_sync_to_async(_cursor_set)


def event_update(
    *,
    event_id: str,
    event_type: str,
    source_event_type: str,
    chat_id: str,
    chat_type: str,
    actor_id: str,
    actor_name: str = "",
    target_message_id: str = "",
    text: str | None = None,
    reply_target: ReplyTarget | None = None,
    extra: dict[str, Any] | None = None,
    raw: Any = None,
) -> InboundUpdate:
    """The update of an event that is not a message arriving (a member joining or leaving, a reaction, an
    edit or a recall, a card's button, the bot added to a chat), in the one shape every adapter gives them
    (`platforms.interface.platform_event_envelope`, docs/platform-events.md): `extra`'s `reaction` and
    `action` go where that shape puts the emoji and the card's value; the rest joins `data`."""
    rest = dict(extra or {})
    envelope = platform_event_envelope(
        event_id=event_id,
        event_type=event_type,
        source_event_type=source_event_type,
        chat_id=chat_id or None,
        chat_type=chat_type or None,
        actor_id=actor_id or "unknown",
        actor_name=actor_name or actor_id,
        target_message_id=target_message_id or None,
        reaction=rest.pop("reaction", None) or None,
        action=rest.pop("action", None),
        text=text,
        reply_target=reply_target,
        extra=rest,
        raw=raw,
        event_time=time.time(),
    )
    return InboundUpdate(envelope=envelope)
