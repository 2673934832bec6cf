"""Group commit on an event loop (`foundation.batches`), the queue under the worker's result writes and its
publications: a lone item is handled at once, what arrives while a batch is handled goes in the next one in
the order it came, each item's future gets its own outcome, and a closing loop leaves nobody waiting."""

from __future__ import annotations

import asyncio

import pytest

from foundation.batches import Batch, Batches, settle


class _Handler:
    """Records each batch; holds a batch open until released, as a slow database would."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, batch: Batch[int, int]) -> None:
        self.batches.append([item for item, _ in batch])
        await self.gate.wait()
        for item, done in batch:
            if item < 0:
                settle(done, 0, ValueError(f"refused {item}"))
            elif item % 10:  # items ending in 0 are left unsettled by this handler
                settle(done, item * 2)


async def test_a_lone_item_goes_at_once_and_what_comes_meanwhile_goes_together_in_order():
    handler = _Handler()
    queue: Batches[int, int] = Batches(handler)
    handler.gate.clear()
    first = queue.submit(1)
    await asyncio.sleep(0)
    assert handler.batches == [[1]]  # nothing waited for company

    later = [queue.submit(n) for n in (2, 3, 4)]
    await asyncio.sleep(0)
    assert handler.batches == [[1]]  # the first batch is still in flight
    handler.gate.set()

    assert await asyncio.gather(first, *later) == [2, 4, 6, 8]
    assert handler.batches == [[1], [2, 3, 4]]


async def test_each_item_gets_its_own_outcome_and_an_unsettled_one_is_cancelled():
    queue: Batches[int, int] = Batches(_Handler())
    refused, doubled, unsettled = queue.submit(-1), queue.submit(7), queue.submit(10)

    with pytest.raises(ValueError, match="refused -1"):
        await refused
    assert await doubled == 14
    with pytest.raises(asyncio.CancelledError):
        await unsettled


def test_a_closing_loop_cancels_what_was_not_handled_and_nobody_is_left_waiting():
    handler = _Handler()
    futures: list[asyncio.Future[int]] = []

    async def main() -> None:
        handler.gate.clear()  # the first batch never finishes
        queue: Batches[int, int] = Batches(handler)
        futures.extend([queue.submit(1)])
        await asyncio.sleep(0)
        futures.extend([queue.submit(2), queue.submit(3)])

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
        # What `asyncio.run` does on the way out: cancel the tasks still pending (the flush).
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    finally:
        loop.close()

    assert [f.cancelled() for f in futures] == [True, True, True]
