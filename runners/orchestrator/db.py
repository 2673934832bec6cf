"""Database access from the worker's event loop.

ORM calls run on a small dedicated thread pool (`LANGBOT_WORKER_DB_THREADS`) rather than asgiref's
single thread-sensitive thread, so the runs of one process write concurrently; each call hands its
connection back (to the PostgreSQL pool when it is configured) so idle threads hold nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from django.db import close_old_connections

P = ParamSpec("P")
T = TypeVar("T")


class DatabaseExecutor:
    def __init__(self, threads: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="langbot-run-db")

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(_call, fn, *args, **kwargs))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()
