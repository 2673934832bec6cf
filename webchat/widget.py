"""The website chat widget's rules (README, "Website chat widget"): public widget ids, visitor tokens, the widget's
socket tickets, allowed origins and the rate limits. The HTTP views are in `webchat.widget_views`, the visitor
socket in `webchat.widget_consumer`.

- A widget id (`data-bot`) names a bot of platform `webui` without saying anything about it: the bot's primary
  key and a fixed tag in one AES block under a key derived from `SECRET_KEY` (one block of a block cipher is a
  pseudo-random permutation), base32. Unlike a workspace slug and bot id it shows neither names nor how many
  bots there are, and a made-up id matches no bot (the tag must come out right). It stays the same as long as
  the secret key does; an old key listed in `SECRET_KEY_FALLBACKS` still opens the ids it made.
- A visitor token is `django.core.signing` of `{bot pk, visitor id}` with a timestamp: it binds one visitor to
  one bot, and the visitor's conversation is derived from it (`widget:<bot id>:<visitor id>`), so no request
  can name another visitor's conversation. Tokens live in the visitor's browser (localStorage).
- A socket ticket is one-time and short, as the chat's (`webchat.tickets`), but kept under a prefix of its own:
  the chat socket never accepts it, and the visitor socket accepts nothing else.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.utils.crypto import salted_hmac

from bindings.models import Bot

WIDGET_ID_PREFIX = "w"
_ID_TAG = b"lbwidget"
_ID_KEY_SALT = "langbot.widget.id"
_TOKEN_SALT = "langbot.widget.visitor"
_TICKET_PREFIX = "langbot:widget-ticket:"
_COUNTER_PREFIX = "langbot:widget-limit:"
TICKET_TTL_SECONDS = 60
WIDGET_CONVERSATION_PREFIX = "widget:"
_DEFAULT_PORTS = {"http": 80, "https": 443}


# --- widget ids -------------------------------------------------------------------------------------------


def _id_cipher(secret: str) -> Cipher[Any]:
    key = salted_hmac(_ID_KEY_SALT, "widget-id-key", secret=secret, algorithm="sha256").digest()[:16]
    # One block, never more: ECB over a single block is the block cipher itself.
    return Cipher(algorithms.AES(key), modes.ECB())


def widget_public_id(bot: Bot) -> str:
    """The id a page's `data-bot` names this bot by."""
    block = bot.pk.to_bytes(8, "big") + _ID_TAG
    encryptor = _id_cipher(settings.SECRET_KEY).encryptor()
    sealed = encryptor.update(block) + encryptor.finalize()
    return WIDGET_ID_PREFIX + base64.b32encode(sealed).decode().rstrip("=").lower()


def _bot_pk_of(widget_id: str) -> int | None:
    if not widget_id.startswith(WIDGET_ID_PREFIX) or len(widget_id) != 27:
        return None
    try:
        sealed = base64.b32decode(widget_id[1:].upper() + "======")
    except (binascii.Error, ValueError):
        return None
    if len(sealed) != 16:
        return None
    for secret in [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]:
        decryptor = _id_cipher(secret).decryptor()
        block = decryptor.update(sealed) + decryptor.finalize()
        if block[8:] == _ID_TAG:
            return int.from_bytes(block[:8], "big")
    return None


def widget_bot(widget_id: str) -> Bot | None:
    """The enabled web bot a widget id names, or None (unknown, disabled, or not a web bot)."""
    pk = _bot_pk_of(widget_id)
    if pk is None:
        return None
    return (
        Bot.objects.filter(pk=pk, enabled=True, platform=Bot.Platform.WEBUI, workspace__isnull=False)
        .select_related("workspace")
        .defer("credentials")  # a web bot has none worth decrypting here
        .first()
    )


# --- origins ----------------------------------------------------------------------------------------------


def origin_normalized(origin: str) -> str | None:
    """`scheme://host[:port]` in lower case with the scheme's default port left out, or None when `origin`
    is not such an origin (a path, a query, credentials, another scheme)."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port and port != _DEFAULT_PORTS[scheme] else "")


def widget_origin_allowed(bot: Bot, origin: str | None) -> bool:
    """Whether a page at `origin` may use this bot's widget: the origin is in the bot's `allowed_origins`
    (an empty list turns the widget off)."""
    if not origin:
        return False
    candidate = origin_normalized(origin)
    if candidate is None:
        return False
    return candidate in {origin_normalized(str(o)) for o in (bot.allowed_origins or [])}


# --- visitors ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Visitor:
    bot_pk: int
    visitor_id: str


class VisitorTokenError(Exception):
    """A visitor token that is forged, expired, malformed or another bot's."""


def visitor_new(bot: Bot) -> Visitor:
    return Visitor(bot.pk, secrets.token_urlsafe(16))


def visitor_token(visitor: Visitor) -> str:
    return signing.dumps({"b": visitor.bot_pk, "v": visitor.visitor_id}, salt=_TOKEN_SALT, compress=False)


def visitor_from_token(bot: Bot, token: str) -> Visitor:
    """The visitor a token names, for this bot only. Raises `VisitorTokenError`."""
    if not isinstance(token, str) or not token or len(token) > 512:
        raise VisitorTokenError("malformed")
    max_age = settings.LANGBOT_WIDGET_VISITOR_DAYS * 86400
    try:
        payload = signing.loads(token, salt=_TOKEN_SALT, max_age=max_age)
    except signing.BadSignature as exc:  # SignatureExpired is one too
        raise VisitorTokenError("bad signature") from exc
    if not isinstance(payload, dict) or payload.get("b") != bot.pk or not isinstance(payload.get("v"), str):
        raise VisitorTokenError("another bot's token")
    return Visitor(bot.pk, payload["v"])


def visitor_conversation_id(bot: Bot, visitor: Visitor) -> str:
    return f"{WIDGET_CONVERSATION_PREFIX}{bot.bot_id}:{visitor.visitor_id}"


# --- socket tickets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WidgetGrant:
    """What a widget ticket lets its socket do: talk as one visitor to one bot, from one origin."""

    bot_pk: int
    workspace_id: int
    visitor_id: str
    origin: str
    language: str
    expires_at: float


def widget_ticket_issue(*, bot: Bot, visitor: Visitor, origin: str, language: str) -> str:
    token = secrets.token_urlsafe(32)
    grant = WidgetGrant(
        bot.pk, bot.workspace_id, visitor.visitor_id, origin_normalized(origin) or "", language,
        time.time() + TICKET_TTL_SECONDS,
    )  # fmt: skip
    cache.set(_TICKET_PREFIX + token, asdict(grant), timeout=TICKET_TTL_SECONDS + 1)
    return token


def widget_ticket_consume(*, ticket: str) -> WidgetGrant | None:
    """The grant of a valid, unused, unexpired widget ticket, used up by this call; None otherwise. Of two
    sockets racing with one ticket only the one whose delete removes the key gets in."""
    if not ticket or len(ticket) > 128:
        return None
    key = _TICKET_PREFIX + ticket
    stored = cache.get(key)
    if stored is None or not cache.delete(key):
        return None
    grant = WidgetGrant(**stored)
    return grant if grant.expires_at > time.time() else None


# --- rate limits ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limited:
    """A refused request: wait `retry_after` seconds."""

    retry_after: int


def rate_take(*, key: str, limit: int, period: int) -> Limited | None:
    """Count one request against `limit` per fixed window of `period` seconds (one cache counter per
    window, shared by every web process); None when it is within the limit. A limit of 0 or less is off."""
    if limit <= 0:
        return None
    now = time.time()
    window = int(now // period)
    counter = f"{_COUNTER_PREFIX}{key}:{window}"
    try:
        count = int(cache.incr(counter))
    except ValueError:
        count = 1 if cache.add(counter, 1, timeout=period * 2) else int(cache.incr(counter))
    if count <= limit:
        return None
    return Limited(retry_after=max(1, int((window + 1) * period - now) + 1))


def session_limit_ip(ip: str, *, new_visitor: bool) -> Limited | None:
    """Session requests of one address: new visitors per hour, and every session request per minute."""
    limited = rate_take(key=f"ip-min:{ip}", limit=settings.LANGBOT_WIDGET_SESSIONS_PER_IP_MINUTE, period=60)
    if limited is None and new_visitor:
        limited = rate_take(key=f"ip-new:{ip}", limit=settings.LANGBOT_WIDGET_NEW_VISITORS_PER_IP_HOUR, period=3600)
    return limited


def message_limit_visitor(bot_pk: int, visitor_id: str) -> Limited | None:
    """Messages of one visitor per minute."""
    limit = settings.LANGBOT_WIDGET_MESSAGES_PER_VISITOR_MINUTE
    return rate_take(key=f"msg:{bot_pk}:{visitor_id}", limit=limit, period=60)
