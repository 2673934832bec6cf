"""The Transport interface shared by every carrier of wire frames (stdio pipes, WebSocket, in-memory).

What belongs here: the Transport protocol, the exceptions a transport raises, and nothing that knows
about a particular carrier.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class TransportClosed(Exception):  # noqa: N818 - name pinned by the wire contract
    """The transport reached EOF or failed; no more frames will arrive or can be sent."""


class FrameTooLarge(Exception):  # noqa: N818 - reads like TransportClosed, its sibling
    """A received frame exceeded the cap and was discarded by the transport.

    `head` keeps the first bytes so that the Connection can still tell which call it belonged to;
    `size` is the number of bytes seen (a lower bound when the transport stopped counting).
    """

    def __init__(self, head: bytes, size: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the cap")
        self.head = head
        self.size = size


@runtime_checkable
class Transport(Protocol):
    async def send(self, frame: bytes) -> None:
        """Send one encoded frame (no delimiter). Raises TransportClosed when the peer is gone."""
        ...

    async def receive(self) -> bytes:
        """Return the next frame. Raises TransportClosed at EOF, FrameTooLarge for a discarded frame."""
        ...

    async def close(self) -> None: ...
