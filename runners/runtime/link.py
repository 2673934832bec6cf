"""The host's link to the plugin runtime: one multiplexed connection per process.

Each host process (web or worker) owns one `RuntimeLink`: an asyncio loop on a daemon thread and one
`langbot_sdk.wire.Connection` to the runtime, opened lazily and reopened after it drops. In `stdio` mode
the link spawns the runtime as a child process; with a `ws://` URL it connects to a runtime started with
`python -m langbot_sdk.runtime --listen`. Sync callers (views, management commands) use `call_sync`;
code already on the link's loop awaits `call`/`stream`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any, TypeVar

from django.conf import settings

from langbot_sdk.protocol import AgentAPIError, AgentAPIException, ErrorCode
from langbot_sdk.runtime.environment import runtime_environment
from langbot_sdk.wire import Connection, Handler, Transport, connect_websocket, spawn_stdio_transport
from runners.metrics import RUNTIME_CONNECTED

logger = logging.getLogger(__name__)

T = TypeVar("T")


class RuntimeUnavailable(AgentAPIException):
    """The runtime could not be reached or started."""


def runtime_child_env(plugin_dirs: list[str]) -> dict[str, str]:
    """The stdio child's environment: the runtime allowlist (`langbot_sdk.runtime.environment`) of ours."""
    return runtime_environment(
        os.environ,
        LANGBOT_PLUGIN_DIRS=os.pathsep.join(plugin_dirs),
        PYTHONUNBUFFERED="1",
        # The child freezes its start-up objects as the host process does (langbot_host/core/process.py).
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
        handlers: Mapping[str, Handler] | None = None,
    ) -> None:
        self.url = url
        self.token = token
        self.plugin_dirs = plugin_dirs
        self.call_timeout = call_timeout
        self.handlers = dict(handlers or {})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._connection: Connection | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._child: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None

    def register_handlers(self, handlers: Mapping[str, Handler]) -> None:
        """Serve these runtime → host actions on this link (now and on every reconnect)."""
        self.handlers.update(handlers)
        connection = self._connection
        if connection is not None and not connection.closed:
            for action, handler in handlers.items():
                connection.register(action, handler)

    # -- the loop thread ---------------------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._thread_lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="langbot-runtime-link", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                self._connection, self._connect_lock = None, None
            return self._loop

    def run_sync(self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run a coroutine on the link's loop from synchronous code and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=timeout)

    # -- connection -------------------------------------------------------------------------------
    async def connection(self) -> Connection:
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
            RUNTIME_CONNECTED.set(1)
            self._watch = asyncio.get_running_loop().create_task(self._watch_closed(connection))
            return connection

    async def _watch_closed(self, connection: Connection) -> None:
        await connection.wait_closed()
        if self._connection is connection or self._connection is None:
            RUNTIME_CONNECTED.set(0)

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

    async def call(self, action: str, data: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        connection = await self.connection()
        return await connection.call(action, data, timeout=timeout or self.call_timeout)

    async def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        connection = await self.connection()
        async for item in connection.stream(action, data, timeout=timeout):
            yield item

    def call_sync(self, action: str, data: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        budget = timeout or self.call_timeout
        # The outer wait allows for a cold start of a stdio runtime on top of the call itself.
        return self.run_sync(self.call(action, data, timeout=budget), timeout=budget + 30)

    async def aclose(self) -> None:
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
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self.run_sync(self.aclose(), timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._loop, self._thread = None, None


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
