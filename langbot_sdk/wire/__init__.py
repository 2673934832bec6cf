"""The wire between the host and a plugin runtime: JSON frames, a multiplexed Connection, and the stdio
and WebSocket transports that carry them (docs/protocol.md, "Wire").

What belongs here: only the public names; each lives in its own module.
"""

from .connection import CallInfo, Connection, Handler, ResponseStream
from .errors import WireError
from .framing import MAX_WIRE_MESSAGE_BYTES
from .memory import MemoryTransport, memory_transport_pair
from .stdio import StdioTransport, open_stdio_transport, spawn_stdio_transport
from .transport import FrameTooLarge, Transport, TransportClosed
from .websocket import WebSocketServerHandle, WebSocketTransport, connect_websocket, serve_websocket

__all__ = [
    "MAX_WIRE_MESSAGE_BYTES",
    "CallInfo",
    "Connection",
    "FrameTooLarge",
    "Handler",
    "MemoryTransport",
    "ResponseStream",
    "StdioTransport",
    "Transport",
    "TransportClosed",
    "WebSocketServerHandle",
    "WebSocketTransport",
    "WireError",
    "connect_websocket",
    "memory_transport_pair",
    "open_stdio_transport",
    "serve_websocket",
    "spawn_stdio_transport",
]
