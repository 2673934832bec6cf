"""The host end of LangBot's plugin runtime control connection (`lbp rt --ws-control-port`).

LangBot's wire is not ours (`langbot_sdk.wire`): each WebSocket text message is one JSON object, a request
`{seq_id, action, data, context?}` or a response `{seq_id, code, message, data, chunk_status}` (`code` 0 is
success; a streamed answer is several responses with `chunk_status: "continue"` and a last `"end"`). Either
side calls the other; `__cancel_action {seq_id}` asks the peer to stop one of its requests. Each side
numbers its own requests, so a response is matched by (direction, seq_id).

What belongs here: only that wire — sending calls and streams, answering the runtime's calls with the
handlers given, and the runtime's error shape. What the actions mean is `runtimes.langbot.bridge`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

logger = logging.getLogger(__name__)

# A handler answers one call of the runtime: a dict (one response) or an async iterator of dicts (a stream).
LangBotHandler = Callable[[dict[str, Any], dict[str, Any] | None], Awaitable[Any]]

CONTROL_TOKEN_HEADER = "X-LangBot-Plugin-Runtime-Token"
CANCEL_ACTION = "__cancel_action"
STREAM_ACK = "__stream_ack"
PING = "__ping"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class LangBotCallError(Exception):
    """The runtime answered a call with an error (`code` != 0), or the connection went away."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data = data or {}


class LangBotConnection:
    """One control connection to LangBot's runtime; `run()` reads until it closes."""

    def __init__(self, ws: ClientConnection, handlers: Mapping[str, LangBotHandler]) -> None:
        self.ws = ws
        self.handlers = dict(handlers)
        self._seq = 0
        # Answers the runtime's `__cancel_action`/`__stream_ack` calls, kept so they are not collected early.
        self._replies: set[asyncio.Task[None]] = set()
        self._waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._queues: dict[int, asyncio.Queue[dict[str, Any] | BaseException]] = {}
        self._serving: dict[int, asyncio.Task[None]] = {}
        self._send_lock = asyncio.Lock()
        self.closed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, url: str, handlers: Mapping[str, LangBotHandler], *, token: str = "", timeout: float = 10.0
    ) -> LangBotConnection:
        headers = {CONTROL_TOKEN_HEADER: token} if token else None
        ws = await asyncio.wait_for(
            connect(url, additional_headers=headers, max_size=MAX_MESSAGE_BYTES, ping_interval=20), timeout
        )
        connection = cls(ws, handlers)
        connection._reader = asyncio.create_task(connection._read(), name=f"langbot runtime {url}")
        return connection

    async def aclose(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send(json.dumps(message, ensure_ascii=False))

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    async def call(
        self, action: str, data: dict[str, Any], *, context: dict[str, Any] | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Call one of the runtime's actions and wait for its one answer."""
        seq = self._next_seq()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[seq] = future
        request: dict[str, Any] = {"seq_id": seq, "action": action, "data": data}
        if context is not None:
            request["context"] = context
        try:
            if self.closed.is_set():
                raise LangBotCallError("the LangBot plugin runtime connection is closed")
            try:
                await self._send(request)
            except ConnectionClosed as exc:
                raise LangBotCallError(f"the LangBot plugin runtime connection closed: {exc}") from None
            response = await asyncio.wait_for(future, timeout)
        finally:
            self._waiters.pop(seq, None)
        if response.get("code") != 0:
            raise LangBotCallError(str(response.get("message") or "error"), response.get("data"))
        return dict(response.get("data") or {})

    async def stream(
        self, action: str, data: dict[str, Any], *, context: dict[str, Any] | None = None, timeout: float = 300.0
    ) -> AsyncIterator[dict[str, Any]]:
        """Call a streaming action; yields each chunk's data. Leaving early cancels the call at the runtime.

        No flow control is asked for (`stream_flow_control`), so the runtime sends without waiting for acks;
        a consumer slower than the runtime is buffered here.
        """
        seq = self._next_seq()
        queue: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self._queues[seq] = queue
        request: dict[str, Any] = {"seq_id": seq, "action": action, "data": data}
        if context is not None:
            request["context"] = context
        finished = False
        try:
            if self.closed.is_set():
                raise LangBotCallError("the LangBot plugin runtime connection is closed")
            await self._send(request)
            while True:
                item = await asyncio.wait_for(queue.get(), timeout)
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.get("code") != 0:
                    finished = True
                    raise LangBotCallError(str(item.get("message") or "error"), item.get("data"))
                if item.get("chunk_status") == "end":
                    finished = True
                    return
                yield dict(item.get("data") or {})
        finally:
            self._queues.pop(seq, None)
            if not finished and not self.closed.is_set():
                with contextlib.suppress(Exception):
                    await self.call(CANCEL_ACTION, {"seq_id": seq}, context=context, timeout=5.0)

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                try:
                    message = json.loads(raw)
                except (TypeError, ValueError):
                    logger.warning("LangBot runtime sent a frame that is not JSON; ignored")
                    continue
                if not isinstance(message, dict):
                    continue
                seq = message.get("seq_id")
                if "code" in message:
                    self._route_response(seq, message)
                elif "action" in message and isinstance(seq, int):
                    self._serve(seq, message)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()
            error = LangBotCallError("the LangBot plugin runtime connection closed")
            for future in self._waiters.values():
                if not future.done():
                    future.set_exception(error)
            for queue in self._queues.values():
                queue.put_nowait(error)
            for task in list(self._serving.values()):
                task.cancel()

    def _route_response(self, seq: Any, message: dict[str, Any]) -> None:
        future = self._waiters.get(seq)
        if future is not None and not future.done():
            future.set_result(message)
            return
        queue = self._queues.get(seq)
        if queue is not None:
            queue.put_nowait(message)

    def _serve(self, seq: int, message: dict[str, Any]) -> None:
        action = str(message.get("action"))
        if action == CANCEL_ACTION:
            target_seq = (message.get("data") or {}).get("seq_id")
            target = self._serving.get(target_seq) if isinstance(target_seq, int) else None
            if target is not None:
                target.cancel()
            self._reply_soon(seq, {"cancelled": target is not None})
            return
        if action == STREAM_ACK:
            # Only sent for streams that asked for flow control; the host's streams never do.
            self._reply_soon(seq, {"accepted": False})
            return
        task = asyncio.create_task(self._handle(seq, action, message), name=f"langbot call {action}")
        self._serving[seq] = task
        task.add_done_callback(lambda _t: self._serving.pop(seq, None))

    def _reply_soon(self, seq: int, data: dict[str, Any]) -> None:
        task = asyncio.create_task(self._answer(seq, data))
        self._replies.add(task)
        task.add_done_callback(self._replies.discard)

    async def _answer(self, seq: int, data: dict[str, Any], *, chunk_status: str | None = None) -> None:
        response: dict[str, Any] = {"seq_id": seq, "code": 0, "message": "success", "data": data}
        if chunk_status is not None:
            response["chunk_status"] = chunk_status
        with contextlib.suppress(ConnectionClosed):
            await self._send(response)

    async def _fail(self, seq: int, message: str, data: dict[str, Any] | None = None) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._send({"seq_id": seq, "code": 1, "message": message, "data": data or {}})

    async def _handle(self, seq: int, action: str, message: dict[str, Any]) -> None:
        handler = self.handlers.get(action)
        if handler is None:
            text = f"the host does not provide {action} to LangBot plugins"
            error = {"code": "invalid_argument", "message": text, "retryable": False, "details": {"action": action}}
            await self._fail(seq, f"invalid_argument: {text}", {"error": error})
            return
        data = message.get("data") if isinstance(message.get("data"), dict) else {}
        context = message.get("context") if isinstance(message.get("context"), dict) else None
        try:
            result = await handler(dict(data or {}), context)
            if isinstance(result, dict):
                await self._answer(seq, result)
                return
            async for chunk in result:
                await self._answer(seq, chunk, chunk_status="continue")
            await self._answer(seq, {}, chunk_status="end")
        except asyncio.CancelledError:
            raise
        except LangBotCallError as exc:
            await self._fail(seq, str(exc), exc.data)
        except Exception:
            logger.exception("serving %s for the LangBot runtime failed", action)
            await self._fail(seq, f"RuntimeError: the host failed to serve {action}")
