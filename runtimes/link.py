"""The host's link to the plugin runtime: one multiplexed connection per process.

Each host process (web or worker) owns one `RuntimeLink`: an event loop on a daemon thread (a
`foundation.portal.ThreadPortal`) and one `langbot_sdk.wire.Connection` to the runtime, opened lazily
and reopened after it drops. In `stdio` mode the link spawns the runtime as a child process; with a
`ws://` URL it connects to a runtime started with `python -m langbot_sdk.runtime --listen`. Sync callers
(views, management commands) use `call_sync`; code already on the link's loop awaits `call`/`stream`.

A runtime that dies (killed, crashed) comes back by itself: when a connection the link did not close
drops, the link reconnects in the background with a growing backoff — respawning its stdio child, or
dialling the `--listen` runtime again until whoever supervises it (`make run`) has restarted it. Runs in
flight on the dropped connection fail with a retryable `runtime_error` (the orchestrator's reader); a call
made while the runtime is down waits up to `reconnect_wait` seconds for it before failing the same way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal
from django.conf import settings

from foundation.portal import ThreadPortal
from langbot_sdk.protocol import AgentAPIError, AgentAPIException, ErrorCode
from langbot_sdk.runtime.environment import runtime_environment
from langbot_sdk.wire import Connection, Handler, Transport, connect_websocket, spawn_stdio_transport
from runtimes.metrics import RUNTIME_CONNECTED

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Backoff between reconnect attempts after the runtime went away: doubling from the first to the last.
RECONNECT_BACKOFF_FIRST = 0.2
RECONNECT_BACKOFF_MAX = 5.0
# A connection that stayed up this long resets the backoff: the runtime is not in a crash loop.
RECONNECT_STABLE_SECONDS = 30.0


class RuntimeUnavailable(AgentAPIException):
    """The runtime could not be reached or started."""


def runtime_child_env(plugin_dirs: list[str]) -> dict[str, str]:
    """The stdio child's environment: the runtime allowlist (`langbot_sdk.runtime.environment`) of ours."""
    return runtime_environment(
        os.environ,
        LANGBOT_PLUGIN_DIRS=os.pathsep.join(plugin_dirs),
        PYTHONUNBUFFERED="1",
        # The child freezes its start-up objects as the host process does (foundation/process.py).
        LANGBOT_GC_FREEZE="true" if settings.LANGBOT_GC_FREEZE else "false",
    )


class RuntimeLink:
    def __init__(
        self,
        *,
        url: str,
        token: str,
        plugin_dirs: list[str],
        call_timeout: float,
        reconnect_wait: float = 0.0,
        handlers: Mapping[str, Handler] | None = None,
    ) -> None:
        self.url = url
        self.token = token
        self.plugin_dirs = plugin_dirs
        self.call_timeout = call_timeout
        self.reconnect_wait = reconnect_wait
        self.handlers = dict(handlers or {})
        self._portal = ThreadPortal(name="langbot-runtime-link", on_start=self._loop_started)
        self._connection: Connection | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._child: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closing = False
        self._backoff = RECONNECT_BACKOFF_FIRST

    def register_handlers(self, handlers: Mapping[str, Handler]) -> None:
        """Serve these runtime → host actions on this link (now and on every reconnect)."""
        self.handlers.update(handlers)
        connection = self._connection
        if connection is not None and not connection.closed:
            for action, handler in handlers.items():
                connection.register(action, handler)

    # -- the loop thread ---------------------------------------------------------------------------
    def _loop_started(self, _portal: BlockingPortal) -> None:
        # A connection and its lock belong to the loop they were made on; a new loop makes its own.
        self._connection, self._connect_lock = None, None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The link's event loop (started on first use, and again after `close()`)."""
        return self._portal.loop

    def run_sync(self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run a coroutine on the link's loop from synchronous code and wait for its result (cancelled and
        `TimeoutError` after `timeout` seconds)."""
        return self._portal.run_sync(coro, timeout=timeout)

    # -- connection -------------------------------------------------------------------------------
    async def connection(self, *, wait: float | None = None) -> Connection:
        """The open connection, opened (or the stdio runtime spawned) if needed. While the runtime does
        not answer, retry for up to `wait` seconds (default `reconnect_wait`), then raise
        `RuntimeUnavailable` (a retryable `runtime_error`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.reconnect_wait if wait is None else wait)
        delay = RECONNECT_BACKOFF_FIRST
        while True:
            try:
                return await self._connect_once()
            except AgentAPIException as exc:  # RuntimeUnavailable, or the wire's retryable connect failure
                remaining = deadline - loop.time()
                if not exc.error.retryable or remaining <= 0 or self._closing:
                    raise
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, RECONNECT_BACKOFF_MAX)

    async def _connect_once(self) -> Connection:
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._connection is not None and not self._connection.closed:
                return self._connection
            try:
                transport = await self._open_transport()
            except (OSError, TimeoutError) as exc:
                RUNTIME_CONNECTED.set(0)
                raise RuntimeUnavailable(
                    AgentAPIError(
                        code=ErrorCode.RUNTIME_ERROR,
                        message=f"plugin runtime unreachable at {self.url}: {exc}",
                        retryable=True,
                    )
                ) from exc
            connection = Connection(transport, handlers=self.handlers, name="host")
            await connection.start()
            self._connection = connection
            self._closing = False
            RUNTIME_CONNECTED.set(1)
            self._watch = asyncio.get_running_loop().create_task(self._watch_closed(connection))
            return connection

    async def _watch_closed(self, connection: Connection) -> None:
        loop = asyncio.get_running_loop()
        opened = loop.time()
        await connection.wait_closed()
        if self._connection is connection or self._connection is None:
            RUNTIME_CONNECTED.set(0)
        if self._closing or self._connection is not connection:
            return
        # Not closed by us: the runtime went away. Bring it back without waiting for the next call.
        if loop.time() - opened >= RECONNECT_STABLE_SECONDS:
            self._backoff = RECONNECT_BACKOFF_FIRST
        logger.warning("plugin runtime connection lost (%s); reconnecting", self.url)
        while not self._closing:
            await asyncio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, RECONNECT_BACKOFF_MAX)
            if self._connection is not None and self._connection is not connection and not self._connection.closed:
                return  # a caller reconnected meanwhile; its connection has its own watch
            try:
                await self._connect_once()
            except AgentAPIException as exc:
                logger.info("plugin runtime still unreachable: %s", exc.error.message)
                continue
            except Exception:
                logger.exception("reconnecting to the plugin runtime failed")
                continue
            logger.warning("plugin runtime connection restored (%s)", self.url)
            return

    async def _open_transport(self) -> Transport:
        if self.url.startswith(("ws://", "wss://")):
            return await connect_websocket(self.url, token=self.token or None)
        argv = [sys.executable, "-m", "langbot_sdk.runtime", "--stdio"]
        for plugin_dir in self.plugin_dirs:
            argv += ["--plugins-dir", plugin_dir]
        transport, self._child = await spawn_stdio_transport(
            argv, env=runtime_child_env(self.plugin_dirs), cwd=str(settings.BASE_DIR)
        )
        return transport

    async def call(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None, connect_wait: float | None = None
    ) -> dict[str, Any]:
        connection = await self.connection(wait=connect_wait)
        return await connection.call(action, data, timeout=timeout or self.call_timeout)

    async def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        connection = await self.connection()
        async for item in connection.stream(action, data, timeout=timeout):
            yield item

    def call_sync(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None, connect_wait: float | None = None
    ) -> dict[str, Any]:
        budget = timeout or self.call_timeout
        wait = self.reconnect_wait if connect_wait is None else connect_wait
        # The outer wait allows for a cold start of a stdio runtime on top of the call itself.
        return self.run_sync(self.call(action, data, timeout=budget, connect_wait=wait), timeout=budget + wait + 30)

    async def aclose(self) -> None:
        self._closing = True
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
        if self._child is not None and self._child.returncode is None:
            self._child.terminate()
            try:
                await asyncio.wait_for(self._child.wait(), timeout=5)
            except TimeoutError:
                self._child.kill()
        self._child = None

    def close(self) -> None:
        """Close the connection (stopping a stdio runtime), then the loop; the next use starts both anew."""
        if self._portal.running():
            self.run_sync(self.aclose(), timeout=10)
            self._portal.stop()


_link: RuntimeLink | None = None
_link_pid: int | None = None
_link_lock = threading.Lock()


def runtime_link() -> RuntimeLink:
    """The process-wide link, rebuilt after a fork so a child never shares its parent's connection."""
    global _link, _link_pid
    with _link_lock:
        if _link is None or _link_pid != os.getpid():
            _link = RuntimeLink(
                url=settings.LANGBOT_RUNTIME_URL,
                token=settings.LANGBOT_RUNTIME_TOKEN,
                plugin_dirs=list(settings.LANGBOT_PLUGIN_DIRS),
                call_timeout=settings.LANGBOT_RUNTIME_CALL_TIMEOUT,
                reconnect_wait=settings.LANGBOT_RUNTIME_RECONNECT_WAIT,
            )
            _link_pid = os.getpid()
        return _link


def runtime_link_reset() -> None:
    """Close and forget the process-wide link (tests, settings changes)."""
    global _link
    with _link_lock:
        link, _link = _link, None
    if link is not None:
        link.close()
