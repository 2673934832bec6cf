"""A binding's rate limits at admission: how many events of one sender or one chat it answers per window.

`TriggerPolicy.rate_limit_per_user` and `rate_limit_per_chat` (bindings.triggers) are counted here, for the
binding that would reply to an event (observers follow it: an over-limit event starts no run at all), after
its trigger filter accepted the event, so messages it would not answer never count. Each limit is a fixed
window in Redis per binding, bot and sender (or chat): the counter is created with the window as its expiry
by the event that opens the window. Every check is one round trip (`_COUNT_SCRIPT`, a Lua script: the
counters, their expiry and the "told already" mark at once), and a Redis outage lets events through, as the
REST throttle does: a limit is a courtesy to the chat, not a security boundary.

What an over-limit event gets depends on where it came from:
- from a chat platform: it is recorded with the status `rate_limited` (the error names the limit and when
  it lifts), no run starts, and the sender gets one polite reply (the binding's `rate_limit_reply`, else
  `DEFAULT_REPLY`) — at most one per window and limit, however many more messages they send;
- from the REST API or the web chat: it is refused before anything is stored (`gateway.services.
  RateLimitedError`): the API
  answers 429 `rate_limited` with `Retry-After`, the chat socket an error frame; the same `event_id` sent
  again after the wait is accepted as new.
Schedules and the host's own events are never limited.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import redis
from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.models import AgentBinding, Bot
from bindings.policies import RateLimit
from bindings.triggers import trigger_filter
from gateway.envelope import EventEnvelopeIn, EventSource
from runners.actions.delivery import DeliveryError, delivery_port
from runners.models import Run
from transcripts.models import EventLog

logger = logging.getLogger(__name__)

RATE_LIMITED_CODE = "rate_limited"
DEFAULT_REPLY = _("You're sending messages too quickly; please wait a moment.")
LIMITED_SOURCES = frozenset({EventSource.PLATFORM, EventSource.WEBUI, EventSource.API})
REFUSED_SOURCES = frozenset({EventSource.WEBUI, EventSource.API})
"""Sources whose over-limit events are refused (not recorded): their caller is told at once."""
KEY_PREFIX = "lbh:ratelimit"

LimitScope = Literal["user", "chat"]

# KEYS: a counter and its "told" mark per limit, in order; ARGV: each limit's count and window (seconds).
# The first limit that is over returns {its number, milliseconds until it lifts, 1 if this is the first
# event told so in this window}; {0, 0, 0} when all hold. A limit found over stops the count there, so an
# over-limit sender does not use up their chat's allowance as well.
_COUNT_SCRIPT = """
for i = 1, #ARGV / 2 do
  local counter, told = KEYS[2 * i - 1], KEYS[2 * i]
  local limit, window = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local count = redis.call('INCR', counter)
  local left = redis.call('PTTL', counter)
  if count == 1 or left < 0 then
    redis.call('PEXPIRE', counter, window * 1000)
    left = window * 1000
  end
  if count > limit then
    local first = redis.call('SET', told, '1', 'NX', 'PX', math.max(left, 1))
    return {i, left, first and 1 or 0}
  end
end
return {0, 0, 0}
"""

_clients: dict[str, tuple[redis.Redis, Any]] = {}


@dataclass(frozen=True)
class RateLimitHit:
    """An event over a limit: which one, when it lifts, and whether the sender is to be told now."""

    scope: LimitScope
    limit: RateLimit
    retry_after: int
    """Whole seconds until the window ends."""
    notify: bool
    reply: str

    def error(self) -> dict[str, Any]:
        """The `EventLog.error` of the recorded event."""
        return {
            "code": RATE_LIMITED_CODE,
            "message": (
                f"Over the binding's per-{self.scope} rate limit ({self.limit.messages} per "
                f"{self.limit.seconds}s); no run started."
            ),
            "details": {
                "limit": f"rate_limit_per_{self.scope}",
                "messages": self.limit.messages,
                "seconds": self.limit.seconds,
                "retry_after_seconds": self.retry_after,
                "replied": self.notify,
            },
        }


def _script(url: str) -> Any:
    held = _clients.get(url)
    if held is None:
        # Short timeouts: a Redis that hangs must not hold the webhook; a failure lets the event through.
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        held = _clients[url] = (client, client.register_script(_COUNT_SCRIPT))
    return held[1]


def _key(*parts: str) -> str:
    # Platform ids can be long and of any characters: hashed, the key stays short and plain.
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def event_rate_limit_check(
    *, binding: AgentBinding, envelope: EventEnvelopeIn, conversation_id: str, bot: Bot | None
) -> RateLimitHit | None:
    """Count the event against `binding`'s rate limits; the hit when it is over one, else None."""
    if envelope.source not in LIMITED_SOURCES:
        return None
    policy = trigger_filter(binding.trigger_policy).policy
    if policy.rate_limit_per_user is None and policy.rate_limit_per_chat is None:
        return None
    bot_key = bot.bot_id if bot is not None else ""
    chat = envelope.data.get("chat_id")
    chat_id = str(chat) if isinstance(chat, str | int) and not isinstance(chat, bool) and str(chat) else conversation_id
    limits: list[tuple[LimitScope, RateLimit, str]] = []
    actor_id = envelope.actor.actor_id if envelope.actor else None
    if policy.rate_limit_per_user is not None and actor_id:
        limits.append(("user", policy.rate_limit_per_user, _key(bot_key, "user", actor_id)))
    if policy.rate_limit_per_chat is not None:
        limits.append(("chat", policy.rate_limit_per_chat, _key(bot_key, "chat", chat_id)))
    if not limits:
        return None
    keys: list[str] = []
    args: list[int] = []
    for scope, limit, key in limits:
        base = f"{KEY_PREFIX}:{binding.pk}:{scope}:{key}"
        keys += [base, f"{base}:told"]
        args += [limit.messages, limit.seconds]
    try:
        number, left_ms, first = _script(settings.REDIS_URL)(keys=keys, args=args)
    except redis.RedisError:
        logger.warning("rate limit counters unavailable; event let through", exc_info=True)
        return None
    if not number:
        return None
    scope, limit, _unused = limits[int(number) - 1]
    return RateLimitHit(
        scope=scope,
        limit=limit,
        retry_after=max(1, math.ceil(int(left_ms) / 1000)),
        notify=bool(first),
        reply=policy.rate_limit_reply or str(DEFAULT_REPLY),
    )


def rate_limit_refusal(hit: RateLimitHit, *, source: EventSource) -> str | None:
    """What an over-limit event from a source whose caller is told at once is refused with (the gateway
    raises it as `RateLimitedError`); None for the sources whose events are recorded instead."""
    if source not in REFUSED_SOURCES:
        return None
    return gettext("You're sending messages too quickly; try again in %(seconds)d seconds.") % {
        "seconds": hit.retry_after
    }


def rate_limit_reply_on_commit(*, event: EventLog, bot: Bot | None, hit: RateLimitHit) -> None:
    """Send the sender the polite reply once the event's record commits (only for the first over-limit
    event of the window: `hit.notify`). Like the host's other own replies, through the delivery port's
    `message.send` in the event's chat."""
    if hit.notify and bot is not None:
        transaction.on_commit(partial(_reply_send, event=event, bot=bot, text=hit.reply))


def _reply_send(*, event: EventLog, bot: Bot, text: str) -> None:
    port = delivery_port.installed
    if port is None or port.surface(bot.platform) is None:
        return
    # `message.send` reads a run's bot and event (the chat to answer in); an over-limit event has no run.
    stand_in = Run(workspace_id=event.workspace_id, bot=bot, event=event, conversation_id=event.conversation_id)
    try:
        port.action_deliver(run=stand_in, action="message.send", target={}, payload={"text": text})
    except DeliveryError:
        logger.warning("event %s: the rate-limit reply was refused on %s", event.event_id, bot.platform, exc_info=True)
