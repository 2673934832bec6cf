"""A chat subscriber passes a conversation's run events on in position order (`runners.live.streaming`):
what another run published late, or the channel layer dropped, is read from the database and sent before
the live message that revealed it, and the late message itself is not sent again."""

from __future__ import annotations

from typing import Any

from runners.live.streaming import RunCursor, live_conversation_event, live_conversation_status


# Positions 1..4 of one conversation: run a has seqs 1 and 2 at positions 1 and 3, run b seqs 1, 2 at 2, 4.
def stored(event_id: int, run_id: str, seq: int, position: int, kind: str = "message.delta") -> dict[str, Any]:
    event = {"type": kind, "data": {}}
    return {"type": "run.event", "id": event_id, "run_id": run_id, "seq": seq, "event": event, "position": position}


STORED = [stored(10, "a", 1, 1), stored(11, "b", 1, 2), stored(12, "a", 2, 3, "run.completed"), stored(13, "b", 2, 4)]


async def read_run(run_id: str, after_seq: int, before_seq: int | None, min_id: int) -> list[dict[str, Any]]:
    return [
        m for m in STORED
        if m["run_id"] == run_id and m["seq"] > after_seq and (before_seq is None or m["seq"] < before_seq)
        and m["id"] > min_id
    ]  # fmt: skip


async def read_conversation(after: int, before: int | None) -> list[dict[str, Any]]:
    return [m for m in STORED if m["position"] > after and (before is None or m["position"] < before)]


async def deliver(cursor: RunCursor, message: dict[str, Any]) -> list[int]:
    return [m["id"] async for m in live_conversation_event(cursor, read_run, read_conversation, message)]


async def test_a_live_event_published_ahead_of_another_runs_brings_the_earlier_ones_first():
    cursor = RunCursor(floor_id=0, last_position=0)

    # Run b's second event arrives first (its worker published sooner); then the others, late.
    delivered = await deliver(cursor, STORED[3])
    delivered += [i for message in STORED[:3] for i in await deliver(cursor, message)]

    assert delivered == [10, 11, 12, 13]


async def test_a_resumed_subscriber_does_not_repeat_what_lies_below_its_cursor():
    # Resumed after id 11 (position 2): run b is not yet known to this subscription.
    cursor = RunCursor(floor_id=11, last_position=2)

    assert await deliver(cursor, STORED[1]) == []
    assert await deliver(cursor, STORED[3]) == [12, 13]


async def test_a_run_ended_without_its_last_events_catches_up_the_whole_conversation_in_order():
    cursor = RunCursor(floor_id=0, last_position=0)
    assert await deliver(cursor, STORED[0]) == [10]

    # Everything after position 1 was dropped; run a's end status arrives.
    status = {"type": "run.status", "run_id": "a", "status": "completed"}
    caught_up = [m["id"] async for m in live_conversation_status(cursor, read_run, read_conversation, status)]

    assert caught_up == [11, 12, 13]
