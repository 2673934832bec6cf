"""The WebSocket transport: one frame per text message, for runtimes that live on another machine.

What belongs here: the Transport over a `websockets` connection, the client (`connect_websocket`) and
the server (`serve_websocket`) with its optional bearer-token check at the handshake.

The library's `max_size` is set above the wire cap so that a moderately oversize message reaches our
code (which answers with a payload_too_large error frame and keeps the connection); only a message over
twice the cap is refused by the library itself, which closes the connection (close code 1009).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from websockets.asyncio.client import connect
from websockets.asyncio.connection import Connection as _WsConnection
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.http11 import Request, Response

from langbot_sdk.protocol import AgentAPIError, ErrorCode

from .errors import WireError
from .framing import MAX_WIRE_MESSAGE_BYTES, OVERSIZE_HEAD_BYTES
from .transport import FrameTooLarge, Transport, TransportClosed

logger = logging.getLogger(__name__)


def _library_max_size(max_frame_bytes: int) -> int:
    return 2 * max_frame_bytes


class WebSocketTransport:
    """Frames over an open `websockets` (asyncio API) connection, client or server side."""

    def __init__(self, websocket: _WsConnection, *, max_frame_bytes: int = MAX_WIRE_MESSAGE_BYTES) -> None:
        self._ws = websocket
        self._max_frame_bytes = max_frame_bytes

    @property
    def websocket(self) -> _WsConnection:
        return self._ws

    async def send(self, frame: bytes) -> None:
        try:
            # text=True sends our UTF-8 bytes as a text message without a decode/encode round trip.
            await self._ws.send(frame, text=True)
        except ConnectionClosed as exc:
            raise TransportClosed(str(exc)) from exc

    async def receive(self) -> bytes:
        try:
            message = await self._ws.recv(decode=False)
        except ConnectionClosed as exc:
            raise TransportClosed(str(exc)) from exc
        if len(message) > self._max_frame_bytes:
            raise FrameTooLarge(message[:OVERSIZE_HEAD_BYTES], len(message))
        return message

    async def close(self) -> None:
        await self._ws.close()


async def connect_websocket(
    url: str,
    *,
    token: str | None = None,
    max_frame_bytes: int = MAX_WIRE_MESSAGE_BYTES,
    open_timeout: float | None = 10.0,
) -> WebSocketTransport:
    """Open a client connection. A refused token raises WireError(unauthorized); any other failure to
    connect raises WireError(runtime_error, retryable=True)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    try:
        websocket = await connect(
            url,
            additional_headers=headers,
            max_size=_library_max_size(max_frame_bytes),
            compression=None,
            open_timeout=open_timeout,
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        if status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN):
            sent = "no token was sent" if token is None else "the token sent is not the runtime's"
            message = (
                f"the plugin runtime at {url} refused the connection ({status}): {sent}; set the same "
                "LANGBOT_RUNTIME_TOKEN for the host and the runtime"
            )
            raise WireError(AgentAPIError(code=ErrorCode.UNAUTHORIZED, message=message)) from exc
        raise WireError(
            AgentAPIError(
                code=ErrorCode.RUNTIME_ERROR, message=f"websocket handshake failed ({status})", retryable=True
            )
        ) from exc
    except Exception as exc:
        raise WireError(
            AgentAPIError(code=ErrorCode.RUNTIME_ERROR, message=f"cannot connect to {url}: {exc}", retryable=True)
        ) from exc
    return WebSocketTransport(websocket, max_frame_bytes=max_frame_bytes)


class WebSocketServerHandle:
    """A listening wire server. `port` is the bound port (useful with port=0); `await close()` stops
    accepting, closes open connections and waits for their handlers."""

    def __init__(self, server: Server) -> None:
        self._server = server

    @property
    def port(self) -> int:
        for sock in self._server.sockets:
            name: Any = sock.getsockname()
            if isinstance(name, tuple):
                return int(name[1])
        raise RuntimeError("server has no bound TCP socket")

    @property
    def server(self) -> Server:
        return self._server

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def __aenter__(self) -> WebSocketServerHandle:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _peer(connection: ServerConnection) -> str:
    address = connection.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address or "an unknown address")


def _token_check(token: str) -> Callable[[ServerConnection, Request], Response | None]:
    expected = f"Bearer {token}".encode()

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        headers: Headers = request.headers
        given = headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), expected):
            return None
        # Says from where, so an operator can tell a host with a stale token from a stranger.
        logger.warning("refused a connection from %s: %s", _peer(connection), "wrong token" if given else "no token")
        return connection.respond(HTTPStatus.UNAUTHORIZED, "unauthorized\n")

    return process_request


async def serve_websocket(
    host: str,
    port: int,
    on_transport: Callable[[Transport], Awaitable[None]],
    *,
    token: str | None = None,
    max_frame_bytes: int = MAX_WIRE_MESSAGE_BYTES,
) -> WebSocketServerHandle:
    """Listen for wire clients. Each accepted connection is handed to `on_transport`; the WebSocket is
    closed when that coroutine returns, so it should run the Connection until `wait_closed()`."""

    async def handle(websocket: ServerConnection) -> None:
        transport = WebSocketTransport(websocket, max_frame_bytes=max_frame_bytes)
        try:
            await on_transport(transport)
        except Exception:
            logger.exception("wire connection handler failed for %s", websocket.remote_address)

    server = await serve(
        handle,
        host,
        port,
        process_request=_token_check(token) if token is not None else None,
        max_size=_library_max_size(max_frame_bytes),
        compression=None,
    )
    return WebSocketServerHandle(server)
