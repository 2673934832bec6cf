"""The worker's side of a development runtime: `dev_runner_host(session_id, handlers)` (`runtimes.hosts`).

A development runtime runs on an author's machine and is connected to the host by a socket a web process
holds (`runtimes.dev_consumer`). A worker that runs one of its runners opens its own wire
`Connection` to it, carried by the channel layer: the worker sends `dev.open` (a new connection id and the
worker's process-local reply channel) to the session's group; the consumer asks the CLI to open a local
connection and answers `dev.opened` with its own channel, to which the worker then sends its frames
directly; the CLI's frames come back on the reply channel. The proxy handlers of the worker are registered
on that Connection, so the runner's host calls are authorized and audited exactly as the host's own
runtime's are.

One connection per worker process and session, opened on first use and again after it closed (the CLI
reloaded its runtime, or a transient failure). A session that is gone (nothing answers `dev.open` in
`OPEN_TIMEOUT` seconds, or the CLI refused to open) and a connection dropped under a run fail that run with
a retryable `runtime_error` naming the development runtime, never a hang. The web process holding the
socket beats a heartbeat (`dev_access.dev_session_live`); a connection checks it every
`SESSION_CHECK_SECONDS`, and a session found without one is ended (its runners go missing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer

from langbot_sdk.protocol import Action, AgentAPIError, AgentAPIException, ErrorCode
from langbot_sdk.wire import Connection, Handler
from langbot_sdk.wire.framing import MAX_WIRE_MESSAGE_BYTES, OVERSIZE_HEAD_BYTES
from langbot_sdk.wire.transport import FrameTooLarge, TransportClosed
from runtimes.dev_access import dev_session_group, dev_session_live
from runtimes.hosts import run_input_call

logger = logging.getLogger(__name__)

# How long the session's consumer and the CLI get to open a connection: a local WebSocket, so seconds are
# plenty; a session that has ended answers nothing, and this is how long a run waits to learn that.
OPEN_TIMEOUT = 10.0
# How often an open connection checks that its session is still live (`dev_session_live`: not ended, and
# its web process's heartbeat fresh): a web process that stopped or died without closing the session never
# sends `dev.closed`.
SESSION_CHECK_SECONDS = 5.0
# How long a frame waits for room in the consumer's full channel before the connection gives up (doubling
# waits from 10 ms, about 10 s in all).
SEND_FULL_WAIT_SECONDS = 5.0


class DevRuntimeUnavailable(AgentAPIException):
    """The development runtime could not be reached (its session ended, or it refused the connection)."""


def _unavailable(session_id: str, why: str) -> DevRuntimeUnavailable:
    return DevRuntimeUnavailable(
        AgentAPIError(
            code=ErrorCode.RUNTIME_ERROR,
            message=f"the development runtime (session {session_id[:8]}) is not reachable: {why}",
            retryable=True,
        )
    )


class ChannelRelayTransport:
    """Wire frames to and from one local connection of a development runtime, through the channel layer."""

    def __init__(self, layer: Any, *, conn: str, reply_channel: str, consumer_channel: str, session_id: str) -> None:
        self._layer = layer
        self.conn = conn
        self.session_id = session_id
        self._reply = reply_channel
        self._consumer = consumer_channel
        self._closed = False
        self._why = ""
        self._watch = asyncio.get_running_loop().create_task(self._watch_session())

    async def _watch_session(self) -> None:
        """Tell the reader its session ended when the database says so (the reader is never cancelled in
        a channel-layer receive: a message on its way would be lost)."""
        while not self._closed:
            await asyncio.sleep(SESSION_CHECK_SECONDS)
            try:
                live = await database_sync_to_async(dev_session_live)(session_id=self.session_id)
            except Exception:
                logger.warning("development connection %s: session check failed", self.conn, exc_info=True)
                continue
            if not live and not self._closed:
                await self._layer.send(self._reply, {"type": "dev.closed", "error": "the development session ended"})
                return

    async def send(self, frame: bytes) -> None:
        message = {"type": "dev.frame", "conn": self.conn, "data": frame.decode()}
        delay = 0.01
        while not self._closed:
            try:
                await self._layer.send(self._consumer, message)
                return
            except ChannelFull:
                # The consumer's channel is full (its web process is behind): wait for it, not forever.
                if delay > SEND_FULL_WAIT_SECONDS:
                    self._closed, self._why = True, "the development runtime's relay stayed full"
                    break
                await asyncio.sleep(delay)
                delay *= 2
        raise TransportClosed(self._why or "closed")

    async def receive(self) -> bytes:
        while not self._closed:
            message = await self._layer.receive(self._reply)
            kind = message.get("type")
            if kind == "dev.frame":
                frame = str(message.get("data") or "").encode()
                if len(frame) > MAX_WIRE_MESSAGE_BYTES:
                    raise FrameTooLarge(frame[:OVERSIZE_HEAD_BYTES], len(frame))
                return frame
            if kind == "dev.closed":
                self._closed = True
                self._why = str(message.get("error") or "the development runtime closed the connection")
                logger.info("development connection %s closed: %s", self.conn, self._why)
        raise TransportClosed(self._why or "closed")

    async def close(self) -> None:
        self._watch.cancel()
        if self._closed:
            return
        self._closed, self._why = True, "closed by the worker"
        with contextlib.suppress(Exception):
            await self._layer.send(self._consumer, {"type": "dev.close", "conn": self.conn})


async def dev_connection_open(session_id: str) -> ChannelRelayTransport:
    """Ask the session's consumer for a new connection to its CLI's runtime; `DevRuntimeUnavailable` when
    the session is gone or the CLI could not open one."""
    layer = get_channel_layer()
    if layer is None:
        raise _unavailable(session_id, "the host has no channel layer")
    if not await database_sync_to_async(dev_session_live)(session_id=session_id):
        raise _unavailable(session_id, "the session has ended; connect with `python -m langbot_sdk dev` again")
    reply = await layer.new_channel()
    conn = uuid.uuid4().hex
    await layer.group_send(dev_session_group(session_id), {"type": "dev.open", "conn": conn, "reply_to": reply})
    try:
        async with asyncio.timeout(OPEN_TIMEOUT):
            while True:
                message = await layer.receive(reply)
                if message.get("type") == "dev.opened":
                    return ChannelRelayTransport(
                        layer,
                        conn=conn,
                        reply_channel=reply,
                        consumer_channel=str(message["channel"]),
                        session_id=session_id,
                    )
                if message.get("type") == "dev.closed":
                    raise _unavailable(session_id, str(message.get("error") or "it refused the connection"))
    except TimeoutError:
        raise _unavailable(
            session_id, f"no answer in {OPEN_TIMEOUT:.0f} s; is `python -m langbot_sdk dev` still connected?"
        ) from None


class DevRunnerHost:
    """The runners of one development session, for one worker process."""

    def __init__(self, session_id: str, handlers: Mapping[str, Handler]) -> None:
        self.session_id = session_id
        self.handlers = dict(handlers)
        self._connection: Connection | None = None
        self._lock: asyncio.Lock | None = None

    async def connection(self) -> Connection:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._connection is not None and not self._connection.closed:
                return self._connection
            transport = await dev_connection_open(self.session_id)
            connection = Connection(transport, handlers=self.handlers, name=f"dev {self.session_id[:8]}")
            await connection.start()
            self._connection = connection
            return connection

    @asynccontextmanager
    async def run_agent(self, request: dict[str, Any]) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        connection = await self.connection()
        async with connection.stream(Action.RUN_AGENT, request) as stream:
            yield stream

    async def cancel_run(self, run_id: str, reason: str, *, timeout: float) -> None:
        connection = self._connection
        if connection is None or connection.closed:
            # The run's own connection is gone, and with it the run: there is nothing to cancel.
            raise _unavailable(self.session_id, "its connection closed")
        await connection.call(Action.CANCEL_RUN, {"run_id": run_id, "reason": reason}, timeout=timeout)

    async def run_input(self, run_id: str, event_id: str, given: dict[str, Any], *, timeout: float) -> bool:
        connection = self._connection
        if connection is None or connection.closed:
            return False
        return await run_input_call(connection.call, run_id, event_id, given, timeout=timeout)

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None


def dev_runner_host(source_key: str, handlers: Mapping[str, Handler]) -> DevRunnerHost:
    return DevRunnerHost(source_key, handlers)
