"""An in-process Transport pair, for tests and for wiring a host and a runtime inside one event loop.

What belongs here: `memory_transport_pair()` and its transport; nothing carrier-specific elsewhere
depends on it.
"""

from __future__ import annotations

import asyncio

from .transport import TransportClosed


class MemoryTransport:
    """One end of an in-memory pipe; frames sent on one end are received, in order, on the other."""

    def __init__(self) -> None:
        self._inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._peer: MemoryTransport | None = None
        self._closed = False

    async def send(self, frame: bytes) -> None:
        peer = self._peer
        if self._closed or peer is None or peer._closed:
            raise TransportClosed("memory transport is closed")
        peer._inbox.put_nowait(bytes(frame))

    async def receive(self) -> bytes:
        frame = await self._inbox.get()
        if frame is None:
            # Leave the marker for any later receive() as well.
            self._inbox.put_nowait(None)
            raise TransportClosed("memory transport is closed")
        return frame

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.put_nowait(None)
        if self._peer is not None:
            self._peer._inbox.put_nowait(None)


def memory_transport_pair() -> tuple[MemoryTransport, MemoryTransport]:
    left, right = MemoryTransport(), MemoryTransport()
    left._peer, right._peer = right, left
    return left, right
