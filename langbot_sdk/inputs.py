"""A running run's inbox of steered input (docs/protocol.md, "Steering").

What belongs here: `RunInbox`, the queue between the plugin runtime, which puts each `run_input` the host
sends into it, and the runner, which takes them with `api.inputs.next()` / `api.inputs.pending()`. The
runtime answers the host only when the runner has taken an input (or never will: the run ended), so the
host knows which messages the run really received and gives any other its own run.
"""

from __future__ import annotations

import asyncio
from collections import deque

from langbot_sdk.protocol import RunInput

__all__ = ["RunInbox"]


class RunInbox:
    """Steered inputs of one run, in the order the host sent them. Lives on the run's event loop."""

    def __init__(self) -> None:
        self._items: deque[tuple[RunInput, asyncio.Future[bool]]] = deque()
        self._arrived = asyncio.Event()
        self.closed = False

    def offer(self, item: RunInput) -> asyncio.Future[bool]:
        """Queue `item`; the future is True once the runner takes it, False if it never will."""
        taken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.closed:
            taken.set_result(False)
            return taken
        self._items.append((item, taken))
        self._arrived.set()
        return taken

    def _take(self) -> RunInput:
        item, taken = self._items.popleft()
        if not taken.done():
            taken.set_result(True)
        return item

    def pending(self) -> list[RunInput]:
        """Every input already received and not yet taken, without waiting."""
        return [self._take() for _ in range(len(self._items))]

    async def next(self, timeout: float | None = None) -> RunInput | None:
        """The next input, waiting up to `timeout` seconds (None: until one comes or the run ends);
        None when none came in time or the run is ending."""
        try:
            async with asyncio.timeout(timeout):
                while not self._items:
                    if self.closed:
                        return None
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            return None
        return self._take()

    def close(self) -> None:
        """The run is ending: inputs not taken by now never will be (their senders hear False)."""
        self.closed = True
        while self._items:
            _, taken = self._items.popleft()
            if not taken.done():
                taken.set_result(False)
        self._arrived.set()
