"""Database connections of code that waits, and how to recognise that none is left.

Django keeps a thread's connection until the request ends (`request_finished`), and under ASGI every
request's sync work runs on a thread of its own. A request that waits — `POST /events?wait=`, an SSE run
stream — would so keep one of the web process's pooled connections (`LANGBOT_DB_POOL_MAX`) for as long as
it waits, and a few dozen of them leave none for anybody else: other requests then fail after the pool's
timeout. Code that waits therefore reads through `released` / `read_released`: each read hands the
thread's connections back as soon as it is done (to the psycopg pool when one is configured; without a
pool, e.g. on SQLite, the connection is closed), and the next read takes one again. Waiting itself happens
on the channel layer, holding nothing.

A connection inside an atomic block is never given back: closing it would abort the caller's transaction.

`pool_exhausted` tells the error handlers (`foundation.api_errors`) that a request failed for want of a
connection, which they answer with a 503 and `Retry-After` rather than a 500.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import OperationalError, connections

P = ParamSpec("P")
T = TypeVar("T")


def connections_release() -> None:
    """Give back every database connection this thread holds, except those inside an atomic block."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.in_atomic_block:
            connection.close()


def released(fn: Callable[P, T]) -> Callable[P, T]:
    """`fn` followed by `connections_release()`, whether it returned or raised."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            connections_release()

    return call


async def read_released(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run the synchronous read `fn` on this request's sync thread (as `sync_to_async` does) and give the
    thread's connections back before returning: for async code that reads, then waits."""
    return await sync_to_async(released(fn))(*args, **kwargs)


def pool_exhausted(exc: BaseException) -> bool:
    """Whether `exc` says no database connection could be had in time: psycopg_pool's `PoolTimeout` (or
    `TooManyRequests`), which reaches callers wrapped in Django's `OperationalError`."""
    if not isinstance(exc, OperationalError):
        return False
    try:
        from psycopg_pool import PoolTimeout, TooManyRequests
    except ImportError:  # no pool without psycopg_pool
        return False
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, PoolTimeout | TooManyRequests):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
