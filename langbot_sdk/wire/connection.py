"""The multiplexed wire Connection: many concurrent calls and streams, in both directions, over one
Transport.

What belongs here: seq_id allocation, matching responses to pending calls and streams, running request
handlers as tasks, the error frames for bad input, and the connection's lifecycle. Framing lives in
`framing.py`, carriers in `stdio.py` / `websocket.py`.

Hot-path notes: responses are dispatched by the reader itself (a future is resolved or an item appended
to a stream's inbox, no task per frame); only incoming requests get a task, because handlers must run
concurrently. One send lock keeps frames whole whatever the transport does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.protocol import AgentAPIError, AgentAPIException, ErrorCode

from .errors import WireError, connection_closed_error
from .framing import (
    CHUNK_CONTINUE,
    MAX_WIRE_MESSAGE_BYTES,
    OVERSIZE_HEAD_BYTES,
    FrameEncodeError,
    MalformedFrame,
    Request,
    Response,
    decode_frame,
    encode_frame,
    error_frame,
    peek_oversize_head,
    request_frame,
    response_frame,
)
from .transport import FrameTooLarge, Transport, TransportClosed

logger = logging.getLogger("langbot_sdk.wire")


@dataclass(slots=True)
class CallInfo:
    """What a handler knows about the request it serves. `cancelled` is set when the connection closes
    under it (the handler task is cancelled as well)."""

    seq_id: int
    action: str
    connection: Connection
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


Handler = Callable[[dict[str, Any], CallInfo], Awaitable[dict[str, Any]] | AsyncIterator[dict[str, Any]]]


def _error_dict(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code.value, "message": message, "retryable": False, "details": details}


class _ConnectionGoneError(Exception):
    """Raised inside a handler task when its response can no longer be sent."""


class _PendingCall:
    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[dict[str, Any]]) -> None:
        self.future = future

    def feed(self, response: Response) -> bool:
        """Take one response frame; True when the call is finished."""
        if response.chunk_status == CHUNK_CONTINUE:
            # A unary call has no use for stream items; the `end` frame still settles it.
            return False
        if not self.future.done():
            if response.code == 0:
                self.future.set_result(response.data)
            else:
                self.future.set_exception(WireError.from_error_data(response.data, response.message))
        return True

    def fail(self, error: WireError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class _StreamInbox:
    """Items of one streamed response waiting for the consumer. Referenced from the pending table, but
    not the iterator the consumer holds, so dropping that iterator can release the entry."""

    __slots__ = ("error", "finished", "items", "waiter")

    def __init__(self) -> None:
        self.items: deque[dict[str, Any]] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.finished = False
        self.error: WireError | None = None

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def feed(self, response: Response) -> bool:
        if self.finished:
            return True
        if response.chunk_status == CHUNK_CONTINUE and response.code == 0:
            self.items.append(response.data)
            self._wake()
            return False
        self.finished = True
        if response.code != 0:
            self.error = WireError.from_error_data(response.data, response.message)
        self._wake()
        return True

    def fail(self, error: WireError) -> None:
        """End the stream locally (timeout, closed connection): items not yet taken are dropped."""
        if self.finished:
            return
        self.finished = True
        self.error = error
        self.items.clear()
        self._wake()


class ResponseStream(AsyncIterator[dict[str, Any]]):
    """The async iterator returned by Connection.stream(). The request is sent on first iteration;
    `aclose()` (or leaving `async with`) stops consuming early."""

    def __init__(self, connection: Connection, action: str, data: dict[str, Any], timeout: float | None) -> None:
        self._connection = connection
        self._action = action
        self._data = data
        self._timeout = timeout
        self._inbox: _StreamInbox | None = None
        self._seq_id: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._done = False

    def __aiter__(self) -> ResponseStream:
        return self

    async def __aenter__(self) -> ResponseStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def __anext__(self) -> dict[str, Any]:
        inbox = self._inbox
        if inbox is None:
            if self._done:
                raise StopAsyncIteration
            inbox = await self._start()
        while True:
            if inbox.items:
                return inbox.items.popleft()
            if inbox.finished:
                error = inbox.error
                self._release()
                if error is not None:
                    inbox.error = None
                    raise error
                raise StopAsyncIteration
            waiter = asyncio.get_running_loop().create_future()
            inbox.waiter = waiter
            try:
                await waiter
            finally:
                inbox.waiter = None

    async def _start(self) -> _StreamInbox:
        connection = self._connection
        seq_id, payload = connection._prepare_request(self._action, self._data)
        inbox = _StreamInbox()
        self._inbox = inbox
        self._seq_id = seq_id
        connection._pending[seq_id] = inbox
        if self._timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expire, self._timeout)
        try:
            await connection._send(payload)
        except BaseException:
            self._release()
            raise
        return inbox

    def _expire(self, timeout: float) -> None:
        self._timer = None
        if self._inbox is not None:
            self._connection._pending.pop(self._seq_id, None)  # type: ignore[arg-type]
            self._inbox.fail(
                WireError(
                    AgentAPIError(
                        code=ErrorCode.DEADLINE_EXCEEDED,
                        message=f"stream '{self._action}' exceeded its {timeout:g}s timeout",
                    )
                )
            )

    def _release(self) -> None:
        if self._done:
            return
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._seq_id is not None:
            pending = self._connection._pending
            if pending.get(self._seq_id) is self._inbox:
                del pending[self._seq_id]
        self._inbox = None

    async def aclose(self) -> None:
        """Stop consuming early: the pending entry goes away and later frames for it are dropped."""
        self._release()

    def __del__(self) -> None:
        # A consumer that breaks out of `async for` drops the iterator without calling aclose().
        if not self._done:
            self._release()


class Connection:
    """One multiplexed wire connection over a Transport; see docs/protocol.md, "Wire", for the frame rules."""

    def __init__(
        self,
        transport: Transport,
        *,
        handlers: Mapping[str, Handler] | None = None,
        max_frame_bytes: int = MAX_WIRE_MESSAGE_BYTES,
        name: str = "",
    ) -> None:
        self._transport = transport
        self._handlers: dict[str, Handler] = dict(handlers or {})
        self._max_frame_bytes = max_frame_bytes
        self.name = name
        self._seq_ids = itertools.count(1)
        self._pending: dict[int, _PendingCall | _StreamInbox] = {}
        self._serving: dict[asyncio.Task[None], CallInfo] = {}
        self._send_lock = asyncio.Lock()
        self._reader_task: asyncio.Task[None] | None = None
        # The loop keeps only weak references to tasks; fire-and-forget sends must be held here.
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self._closed_event = asyncio.Event()

    def __repr__(self) -> str:
        return f"<Connection {self.name or hex(id(self))} closed={self._closed} pending={len(self._pending)}>"

    # -- lifecycle ---------------------------------------------------------------------------------

    def register(self, action: str, handler: Handler) -> None:
        self._handlers[action] = handler

    async def start(self) -> None:
        if self._reader_task is not None:
            raise RuntimeError("connection already started")
        if self._closed:
            raise RuntimeError("connection is closed")
        self._reader_task = asyncio.get_running_loop().create_task(
            self._read_loop(), name=f"wire-reader {self.name}".strip()
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_calls(self) -> int:
        """Calls and streams this side sent that still wait for their `end` frame."""
        return len(self._pending)

    @property
    def serving_calls(self) -> int:
        """Requests from the peer whose handlers are still running."""
        return len(self._serving)

    async def close(self) -> None:
        """Close the transport; every pending call and stream fails with WireError(runtime_error,
        "connection closed") and running handlers are cancelled."""
        if self._mark_closed():
            await self._finish_close()
        else:
            await self._closed_event.wait()

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    async def __aenter__(self) -> Connection:
        if self._reader_task is None:
            await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _mark_closed(self) -> bool:
        if self._closed:
            return False
        self._closed = True
        error = connection_closed_error()
        pending = list(self._pending.values())
        self._pending.clear()
        for entry in pending:
            entry.fail(error)
        current = asyncio.current_task()
        for task, info in self._serving.items():
            info.cancelled.set()
            if task is not current:
                task.cancel()
        return True

    async def _finish_close(self) -> None:
        try:
            await self._transport.close()
        except Exception:
            logger.debug("%r: transport close failed", self, exc_info=True)
        current = asyncio.current_task()
        tasks: list[asyncio.Task[None]] = [t for t in self._serving if t is not current]
        reader = self._reader_task
        if reader is not None and reader is not current:
            reader.cancel()
            tasks.append(reader)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._closed_event.set()

    # -- calling the peer --------------------------------------------------------------------------

    def _prepare_request(self, action: str, data: dict[str, Any]) -> tuple[int, bytes]:
        if self._closed:
            raise connection_closed_error()
        seq_id = next(self._seq_ids)
        try:
            payload = encode_frame(request_frame(seq_id, action, data))
        except FrameEncodeError as exc:
            raise WireError(
                AgentAPIError(code=ErrorCode.INVALID_ARGUMENT, message=f"request data is not JSON: {exc}")
            ) from exc
        if len(payload) > self._max_frame_bytes:
            raise WireError(
                AgentAPIError(
                    code=ErrorCode.PAYLOAD_TOO_LARGE,
                    message=f"request '{action}' is {len(payload)} bytes; the cap is {self._max_frame_bytes}",
                    details={"size": len(payload), "max_bytes": self._max_frame_bytes},
                )
            )
        return seq_id, payload

    async def _send(self, payload: bytes) -> None:
        if self._closed:
            raise connection_closed_error()
        try:
            async with self._send_lock:
                await self._transport.send(payload)
        except TransportClosed:
            if self._mark_closed():
                self._in_background(self._finish_close())
            raise connection_closed_error() from None

    async def call(
        self,
        action: str,
        data: dict[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send a request and return the `data` of its `end` frame; raise WireError on code 1."""
        seq_id, payload = self._prepare_request(action, data)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[seq_id] = _PendingCall(future)
        timer = loop.call_later(timeout, _expire_call, future, action, timeout) if timeout is not None else None
        try:
            await self._send(payload)
            return await future
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(seq_id, None)

    def stream(self, action: str, data: dict[str, Any], *, timeout: float | None = None) -> ResponseStream:
        """Send a request and iterate the items of its streamed response. `timeout` bounds the whole
        stream. Breaking out of the loop or `aclose()` releases the call; later frames are dropped."""
        return ResponseStream(self, action, data, timeout)

    # -- receiving ---------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        transport = self._transport
        max_bytes = self._max_frame_bytes
        try:
            while True:
                try:
                    raw = await transport.receive()
                except FrameTooLarge as exc:
                    self._on_oversize(exc.head, exc.size)
                    continue
                if len(raw) > max_bytes:
                    self._on_oversize(raw[:OVERSIZE_HEAD_BYTES], len(raw))
                    continue
                frame = decode_frame(raw)
                kind = type(frame)
                if kind is Response:
                    self._on_response(frame)  # type: ignore[arg-type]
                elif kind is Request:
                    self._on_request(frame)  # type: ignore[arg-type]
                else:
                    self._on_malformed(frame)  # type: ignore[arg-type]
        except TransportClosed:
            logger.debug("%r: transport closed", self)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%r: reader failed", self)
        finally:
            if self._mark_closed():
                await self._finish_close()

    def _on_response(self, response: Response) -> None:
        seq_id = response.seq_id
        if seq_id is None:
            logger.warning("%r: peer reported an error not tied to a call: %s", self, response.message or response.data)
            return
        entry = self._pending.get(seq_id)
        if entry is None:
            # Typically the answer to a call that timed out or a stream the consumer left.
            logger.debug("%r: dropped response for unknown seq_id %s", self, seq_id)
            return
        if entry.feed(response):
            del self._pending[seq_id]

    def _on_request(self, request: Request) -> None:
        info = CallInfo(request.seq_id, request.action, self)
        task = asyncio.get_running_loop().create_task(self._serve(request, info))
        self._serving[task] = info
        task.add_done_callback(self._serving.pop)

    def _on_oversize(self, head: bytes, size: int) -> None:
        seq_id, is_response = peek_oversize_head(head)
        message = f"frame of {size} bytes exceeds the {self._max_frame_bytes} byte cap"
        logger.warning("%r: discarded oversize frame (%d bytes, seq_id=%s)", self, size, seq_id)
        error = _error_dict(ErrorCode.PAYLOAD_TOO_LARGE, message, size=size, max_bytes=self._max_frame_bytes)
        if is_response:
            # The peer's answer to one of OUR calls was too big: that call fails here, and the peer
            # learns of it through a notice that names none of its own calls.
            if seq_id is not None:
                entry = self._pending.pop(seq_id, None)
                if entry is not None:
                    entry.fail(WireError(AgentAPIError.model_validate(error)))
            self._reply_soon(error_frame(None, error))
        else:
            self._reply_soon(error_frame(seq_id, error))

    def _on_malformed(self, frame: MalformedFrame) -> None:
        logger.warning("%r: malformed frame (seq_id=%s): %s", self, frame.seq_id, frame.reason)
        error = _error_dict(ErrorCode.INVALID_ARGUMENT, f"malformed frame: {frame.reason}")
        if frame.is_response:
            if frame.seq_id is None:
                # Never answer a response-shaped frame that names no call: error notices look like
                # that, and two peers must not answer each other's notices forever.
                return
            entry = self._pending.pop(frame.seq_id, None)
            if entry is not None:
                entry.fail(WireError(AgentAPIError.model_validate(error)))
            self._reply_soon(error_frame(None, error))
        else:
            self._reply_soon(error_frame(frame.seq_id, error))

    def _reply_soon(self, frame: dict[str, Any]) -> None:
        # Not awaited by the reader: if both peers block writing while neither reads, they deadlock.
        if not self._closed:
            self._in_background(self._send_quietly(encode_frame(frame)))

    def _in_background(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_quietly(self, payload: bytes) -> None:
        with contextlib.suppress(WireError):
            await self._send(payload)

    # -- serving the peer --------------------------------------------------------------------------

    async def _respond(self, frame: dict[str, Any]) -> None:
        await self._respond_payload(encode_frame(frame))

    async def _respond_payload(self, payload: bytes) -> None:
        try:
            await self._send(payload)
        except WireError as exc:
            raise _ConnectionGoneError() from exc

    def _encode_response(self, seq_id: int, data: Any, chunk_status: str) -> bytes:
        """Encode one success frame, or raise AgentAPIException describing why it cannot be sent."""
        if not isinstance(data, dict):
            raise AgentAPIException.of(
                ErrorCode.RUNTIME_ERROR, f"handler produced {type(data).__name__}, not an object"
            )
        try:
            payload = encode_frame(response_frame(seq_id, data, chunk_status=chunk_status))  # type: ignore[arg-type]
        except FrameEncodeError as exc:
            raise AgentAPIException.of(ErrorCode.RUNTIME_ERROR, f"handler result is not JSON: {exc}") from exc
        if len(payload) > self._max_frame_bytes:
            raise AgentAPIException.of(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"response of {len(payload)} bytes exceeds the {self._max_frame_bytes} byte cap",
                size=len(payload),
                max_bytes=self._max_frame_bytes,
            )
        return payload

    async def _serve(self, request: Request, info: CallInfo) -> None:
        seq_id = request.seq_id
        handler = self._handlers.get(request.action)
        try:
            try:
                if handler is None:
                    raise AgentAPIException.of(ErrorCode.NOT_FOUND, f"unknown action '{request.action}'")
                result: Any = handler(request.data, info)
                if hasattr(result, "__anext__"):
                    await self._serve_stream(seq_id, result)
                    return
                if isinstance(result, Awaitable):
                    result = await result
                if hasattr(result, "__anext__"):
                    await self._serve_stream(seq_id, result)
                    return
                payload = self._encode_response(seq_id, result, "end")
            except AgentAPIException as exc:
                await self._respond(error_frame(seq_id, exc.error.model_dump(mode="json")))
                return
            except (_ConnectionGoneError, asyncio.CancelledError):
                raise
            except Exception as exc:
                logger.exception("%r: handler for '%s' failed", self, request.action)
                error = _error_dict(
                    ErrorCode.RUNTIME_ERROR,
                    f"internal error while handling '{request.action}'",
                    exception=type(exc).__name__,
                )
                await self._respond(error_frame(seq_id, error))
                return
            await self._respond_payload(payload)
        except _ConnectionGoneError:
            pass

    async def _serve_stream(self, seq_id: int, items: AsyncIterator[Any]) -> None:
        """Send each item as a `continue` frame, then the `end` frame; errors end the stream with code 1
        (after the items already sent). Raises AgentAPIException/other errors to _serve."""
        try:
            async for item in items:
                await self._respond_payload(self._encode_response(seq_id, item, CHUNK_CONTINUE))
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()
        await self._respond(response_frame(seq_id, {}))


def _expire_call(future: asyncio.Future[dict[str, Any]], action: str, timeout: float) -> None:
    if not future.done():
        future.set_exception(
            WireError(
                AgentAPIError(
                    code=ErrorCode.DEADLINE_EXCEEDED,
                    message=f"call '{action}' exceeded its {timeout:g}s timeout",
                )
            )
        )
