"""What a family handler receives and the helpers the families share: the parsed call with its run
session, cursor parsing, the conversation scope check and the per-run rate limiter."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langbot_host.core.sql import DatabaseExecutor
from langbot_sdk.protocol import Action, AgentAPIException
from runners.hostapi.session import RunSession

HandlerResult = dict[str, Any] | AsyncIterator[dict[str, Any]]
FamilyHandler = Callable[["ProxyCall"], Awaitable[HandlerResult]]


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


def require(allowed: bool, api: str) -> None:
    if not allowed:
        raise unauthorized(f"the {api} API is not available to this run", api=api)


def cursor_value(cursor: str | None, *, name: str) -> int | None:
    """A cursor is the decimal id of a row, passed as an opaque string."""
    if cursor is None or cursor == "":
        return None
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 19:
        raise AgentAPIException.invalid_argument(f"{name} is not a cursor this host issued", **{name: cursor})
    return int(cursor)


def page_cursors(cursors: list[str | None], *, has_more: bool, forward: bool) -> tuple[str | None, str | None]:
    """(next_cursor, prev_cursor) of a page whose item cursors are listed oldest first: `next` continues in
    the walking direction (None when nothing more exists there now), `prev` turns back."""
    if not cursors:
        return None, None
    newest, oldest = cursors[-1], cursors[0]
    next_cursor = (newest if forward else oldest) if has_more else None
    return next_cursor, oldest if forward else newest


def own_conversation(session: RunSession, requested: str | None) -> str:
    """The run's conversation. Naming another one answers `not_found`, as for any object outside the
    run's scope: v1 grants no cross-conversation reads (`resources.history.cross_conversation` is never
    set by this host)."""
    own = session.scope.conversation_id
    if not own:
        raise not_found("this run has no conversation")
    if requested is not None and requested != own:
        raise not_found(f"no conversation {requested!r} in this run's scope")
    return own


def own_thread(session: RunSession, requested: str | None) -> str | None:
    """The thread filter of a history read: a run inside a thread reads that thread only; a run outside
    threads may narrow to one thread of its conversation."""
    own = session.scope.thread_id
    if own:
        if requested is not None and requested != own:
            raise not_found(f"no thread {requested!r} in this run's scope")
        return own
    return requested


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
