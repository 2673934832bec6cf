"""The one way the host runs an event loop beside synchronous code: `ThreadPortal`, anyio's `BlockingPortal`
on an asyncio loop in a daemon thread.

What lives on such a loop outlives the call that needs it: the plugin runtime's multiplexed connection
(`runtimes.link`) and the MCP servers' sessions (`resources.mcp.client`), whose anyio task groups
must be entered and left by one task on one loop. Callers come from sync views, management commands,
Celery task threads and other event loops, and hand the portal coroutines.

The loop starts on first use, and again on the next use after `stop()`. A forked child (Celery's prefork
pool) never touches its parent's loop, whose thread it does not have: its first use starts a loop of its
own. The thread is a daemon, so a process that exits without `stop()` is not held up by it.

The thread is started here rather than by `anyio.from_thread.start_blocking_portal`, which runs the same
portal but joins its thread without a bound when it stops, and whose context manager, if a forked child
dropped it, would wait forever on the parent's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long `stop()` waits for the loop's thread to finish (its tasks cancelled, its executor shut down).
STOP_WAIT_SECONDS = 5.0


async def _awaited(coro: Coroutine[Any, Any, T]) -> T:
    # The portal takes a callable and its arguments; callers here hold a coroutine already.
    return await coro


@dataclass(frozen=True)
class _Running:
    portal: BlockingPortal
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    pid: int


class ThreadPortal:
    """An asyncio loop in a daemon thread named `name`, started on first use. `on_start(portal)` is called
    (in the thread that started the loop, before anything else is handed to it) each time a loop starts:
    the place to forget state tied to an earlier loop and to start background tasks."""

    def __init__(self, *, name: str, on_start: Callable[[BlockingPortal], None] | None = None) -> None:
        self.name = name
        self._on_start = on_start
        self._lock = threading.Lock()
        self._running: _Running | None = None

    def _current(self) -> _Running:
        with self._lock:
            running = self._running
            if running is None or running.pid != os.getpid() or not running.thread.is_alive():
                running = self._running = self._start()
                if self._on_start is not None:
                    self._on_start(running.portal)
            return running

    def _start(self) -> _Running:
        ready: concurrent.futures.Future[tuple[BlockingPortal, asyncio.AbstractEventLoop]] = concurrent.futures.Future()

        async def serve() -> None:
            async with BlockingPortal() as portal:
                ready.set_result((portal, asyncio.get_running_loop()))
                await portal.sleep_until_stopped()

        def main() -> None:
            try:
                anyio.run(serve, backend="asyncio")
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                else:
                    logger.exception("the event loop of %s ended with an error", self.name)

        thread = threading.Thread(target=main, name=self.name, daemon=True)
        thread.start()
        portal, loop = ready.result()
        return _Running(portal=portal, loop=loop, thread=thread, pid=os.getpid())

    @property
    def portal(self) -> BlockingPortal:
        """The running portal (started if needed)."""
        return self._current().portal

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started if needed), for code that schedules on it directly."""
        return self._current().loop

    def running(self) -> bool:
        """Whether this process has a loop running now (without starting one)."""
        running = self._running
        return running is not None and running.pid == os.getpid() and running.thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` on the loop; cancelling the returned future cancels it."""
        return self.portal.start_task_soon(_awaited, coro)

    def run_sync(self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result. After `timeout` seconds it is cancelled and
        `TimeoutError` is raised. Not for the loop's own thread (the portal refuses: it would deadlock)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    async def run_async(self, coro: Coroutine[Any, Any, T], *, timeout: float) -> T:
        """`run_sync` for a coroutine on another event loop: waits without blocking that loop."""
        future = self.submit(coro)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            future.cancel()
            raise

    def stop(self, *, wait: float = STOP_WAIT_SECONDS) -> None:
        """Cancel what runs on the loop, end it and wait up to `wait` seconds for its thread. A later use
        starts a new loop. Does nothing when this process has no loop running."""
        with self._lock:
            running, self._running = self._running, None
        if running is None or running.pid != os.getpid() or not running.thread.is_alive():
            return
        with contextlib.suppress(RuntimeError):  # already stopping
            running.portal.call(running.portal.stop, True)
        running.thread.join(wait)
        if running.thread.is_alive():
            logger.warning("the event loop of %s did not end within %g s", self.name, wait)
