"""Group commit on an event loop: items handed in one by one, handled a batch at a time.

Used where every item costs a round trip and many arrive at once: the run results a worker loop writes
(`runners.orchestrator.ledger`) and the messages it publishes (`runners.live.publish`). A lone item is
handled at once; what is handed in while a batch is being handled goes in the next batch, in the order it
came. Nothing waits for a timer, so an idle loop adds no delay and a busy one takes fewer, larger batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Batch = list[tuple[T, "asyncio.Future[R]"]]


class Batches(Generic[T, R]):
    """`submit` queues an item and returns the future of its outcome. `handle` gets a batch of items with
    their futures and settles each; batches are handled one at a time, in order. A future left unsettled
    is cancelled, as are those of what a closing loop (the only one to cancel the handling) had not
    handled: nobody is left waiting."""

    def __init__(self, handle: Callable[[Batch[T, R]], Awaitable[None]]) -> None:
        self._handle = handle
        self._waiting: Batch[T, R] = []
        # Held so the running flush cannot be garbage-collected (the loop keeps only a weak reference).
        self._flusher: asyncio.Task[None] | None = None

    def submit(self, item: T) -> asyncio.Future[R]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[R] = loop.create_future()
        self._waiting.append((item, done))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return done

    async def _flush(self) -> None:
        batch: Batch[T, R] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._handle(batch)
                _cancel(batch)
                batch = []
        finally:
            self._flusher = None
            _cancel([*batch, *self._waiting])
            self._waiting = []


def settle(done: asyncio.Future[R], result: R, error: BaseException | None = None) -> None:
    """Give `done` its outcome, unless its waiter stopped waiting (a cancelled waiter cancels it)."""
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)


def _cancel(batch: Batch[T, R]) -> None:
    for _, done in batch:
        done.cancel()  # a no-op for a settled future
