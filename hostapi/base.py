"""What a family handler receives and the helpers the families share: the parsed call with its run
session, cursor parsing, the conversation scope check and the per-run rate limiter."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from foundation.sql import DatabaseExecutor
from langbot_sdk.authorization import api_require, cursor_value, own_conversation, own_thread, page_cursors
from langbot_sdk.protocol import Action, AgentAPIException
from runners.access.session import RunSession

HandlerResult = dict[str, Any] | AsyncIterator[dict[str, Any]]
FamilyHandler = Callable[["ProxyCall"], Awaitable[HandlerResult]]

__all__ = [
    "FamilyHandler",
    "HandlerResult",
    "ProxyCall",
    "RateLimiter",
    "cursor_value",
    "not_found",
    "own_conversation",
    "own_thread",
    "page_cursors",
    "require",
    "unauthorized",
]


@dataclass
class ProxyCall:
    action: Action
    request: Any
    session: RunSession
    deadline_at: float
    db: DatabaseExecutor

    def remaining(self) -> float:
        return self.deadline_at - time.time()


def unauthorized(message: str, **details: Any) -> AgentAPIException:
    return AgentAPIException.unauthorized(message, **details)


def not_found(message: str, **details: Any) -> AgentAPIException:
    return AgentAPIException.not_found(message, **details)


# The scope checks need no database: they live in the SDK, shared with its fake host.
require = api_require


class RateLimiter:
    """A token bucket per run: `rate` calls per second, bursts up to `burst`. Over it → `rate_limited`
    (retryable). Buckets of runs that stopped calling are forgotten after `idle_seconds`."""

    def __init__(self, *, rate: float, burst: float, idle_seconds: float = 300.0) -> None:
        self.rate = rate
        self.burst = burst
        self.idle_seconds = idle_seconds
        self._buckets: dict[str, tuple[float, float]] = {}
        self._last_prune = time.monotonic()

    def take(self, run_id: str) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        tokens, since = self._buckets.get(run_id, (self.burst, now))
        tokens = min(self.burst, tokens + (now - since) * self.rate)
        if tokens < 1.0:
            self._buckets[run_id] = (tokens, now)
            raise AgentAPIException.rate_limited(
                f"this run makes more than {self.rate:g} host API calls per second", retry_after=1.0 / self.rate
            )
        self._buckets[run_id] = (tokens - 1.0, now)
        if now - self._last_prune > self.idle_seconds:
            self._last_prune = now
            stale = [key for key, (_, at) in self._buckets.items() if now - at > self.idle_seconds]
            for key in stale:
                del self._buckets[key]
