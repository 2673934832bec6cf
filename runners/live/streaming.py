"""Reads and bookkeeping shared by the two live streams of run events: the WebSocket chat consumer
(`webchat.consumers`) and the SSE view (`runners.lifecycle.sse`).

Both follow the rule of docs/architecture.md, "Runs": join the channel-layer group first, read the database once to
replay what was persisted before, then only listen. `RunCursor` makes the seam exact, and `run_replay`, `live_event` and
`live_status` are the seam itself, written once for both. Within a run `seq` is 1..n without
holes and a run's rows are committed in seq order, so the cursor remembers the last seq delivered per run:
a live message at or below it is a duplicate (already replayed), and one beyond the next expected seq
reveals a gap (a message the channel layer dropped, e.g. while the consumer was busy replaying) that is
filled from the database before the live message is passed on. Nothing here polls.

Exact resume when several runs stream into one conversation (the `parallel` policy, observer bindings).
The chat socket's cursor is the global `RunEvent.id` (docs/architecture.md, "Live delivery": `after_id`, kept as it was,
so cursors held by clients stay valid). Ids are drawn from a sequence when a row is inserted, not when it commits, so
on their own two writers could commit out of id order: run A inserts id 10 and is still in its
transaction, run B inserts id 11 and commits, a client is given 11, drops, resumes `after_id=11`, and A's
10 — committed afterwards — is never sent. Two things close that:

- Writers of one conversation are ordered (`runners.models.ConversationStream`): each result write first
  raises the conversation's counter, which locks its row until the write commits, and takes its
  `position`s (1..n per conversation, without holes) and then its ids under that lock. So within a
  conversation positions, ids and commit order agree, and every row below a committed one is committed.
  The lock is held for one statement on the hot path (a CTE of `runners.sql.ledger_write`); writers of
  different conversations never wait for each other.
- A conversation subscriber passes events on in position order (`live_conversation_event`): a live
  message beyond the next expected position means the ones between were published late or dropped, and
  they are read from the database (committed, by the above) and sent first. So whatever `id` a client
  last received, it has received every event of the conversation below it and none above it, and a
  resume by `after_id` (rows with a greater id, in id order) neither loses nor repeats. A per-run cursor
  was the other option; it would have changed the documented cursor and still needed an order for runs
  the client had not yet seen.

Rows written before positions existed have none; for them the subscriber keeps the per-run gap check it
had before. The SSE stream follows one run, whose `seq` already is such a cursor.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runners.live.publish import run_event_message, run_status_message
from runners.models import Run, RunEvent
from runners.sql import conversation_now as conversation_now_statement
from transcripts.models import EventLog

REPLAY_PAGE_SIZE = 200
TERMINAL_RESULT_TYPES = frozenset({"run.completed", "run.failed"})
TERMINAL_STATUSES = frozenset(str(s) for s in Run.TERMINAL_STATUSES)


# --- selectors ---------------------------------------------------------------------------------------


def conversation_exists(*, workspace_id: int, conversation_id: str) -> bool:
    """Whether the workspace has any event in the conversation. Another workspace's conversation of the
    same id is invisible: callers answer exactly as for an unknown one."""
    return EventLog.objects.filter(workspace_id=workspace_id, conversation_id=conversation_id).exists()


def conversation_events_after(
    *, workspace_id: int, conversation_id: str, after_id: int, limit: int = REPLAY_PAGE_SIZE
) -> list[dict[str, Any]]:
    """One page of the conversation's persisted run events with `id > after_id`, oldest first, already in
    the `run.event` message shape."""
    rows = (
        RunEvent.objects.filter(run__workspace_id=workspace_id, run__conversation_id=conversation_id, id__gt=after_id)
        .select_related("run")
        .order_by("id")[:limit]
    )
    return [run_event_message(row.run, row) for row in rows]


def conversation_events_between(
    *, workspace_id: int, conversation_id: str, after_position: int, before_position: int | None = None,
    limit: int = REPLAY_PAGE_SIZE,
) -> list[dict[str, Any]]:  # fmt: skip
    """One page of the conversation's run events with `after_position < position < before_position`, in
    position order, as `run.event` messages."""
    rows = RunEvent.objects.filter(
        run__workspace_id=workspace_id, run__conversation_id=conversation_id, position__gt=after_position
    )
    if before_position is not None:
        rows = rows.filter(position__lt=before_position)
    return [run_event_message(row.run, row) for row in rows.select_related("run").order_by("position")[:limit]]


def runs_events_upto(
    *, workspace_id: int, run_ids: list[str], after_id: int, max_id: int, limit: int = REPLAY_PAGE_SIZE
) -> list[dict[str, Any]]:
    """One page of the events of the workspace's runs `run_ids` with `after_id < id <= max_id`, in id order
    (several runs' events interleaved as they were committed), as `run.event` messages."""
    rows = RunEvent.objects.filter(
        run__workspace_id=workspace_id, run__run_id__in=run_ids, id__gt=after_id, id__lte=max_id
    )
    return [run_event_message(row.run, row) for row in rows.select_related("run").order_by("id")[:limit]]


def conversation_position_at(*, workspace_id: int, conversation_id: str, event_id: int) -> int:
    """The position of the conversation's newest positioned run event with `id <= event_id` (0: none): where
    a subscriber resuming after `event_id` stands (positions and ids of a conversation rise together)."""
    events = RunEvent.objects.filter(run__workspace_id=workspace_id, run__conversation_id=conversation_id)
    exact = events.filter(id=event_id).values_list("position", flat=True).first()
    if exact is not None:
        return int(exact)
    below = events.filter(id__lte=event_id, position__isnull=False).order_by("-position")
    return int(below.values_list("position", flat=True).first() or 0)


def run_events_range(
    *, workspace_id: int, run_id: str, after_seq: int, before_seq: int | None = None, min_id: int = 0,
    limit: int = REPLAY_PAGE_SIZE,
) -> list[dict[str, Any]]:  # fmt: skip
    """Persisted events of one run of the workspace with `after_seq < seq < before_seq` (and `id > min_id`),
    in seq order, as `run.event` messages."""
    rows = RunEvent.objects.filter(run__workspace_id=workspace_id, run__run_id=run_id, seq__gt=after_seq, id__gt=min_id)
    if before_seq is not None:
        rows = rows.filter(seq__lt=before_seq)
    return [run_event_message(row.run, row) for row in rows.select_related("run").order_by("seq")[:limit]]


def run_status_of(*, workspace_id: int, run_id: str) -> dict[str, Any] | None:
    run = (
        Run.objects.filter(workspace_id=workspace_id, run_id=run_id)
        .only("run_id", "status", "status_reason", "authorization")
        .first()
    )
    if run is None:
        return None
    return run_status_message(run)


# --- the seam ----------------------------------------------------------------------------------------


@dataclass
class RunCursor:
    """What one subscriber has been given: the last seq per run, and the global id it started after.

    `floor_id` is the subscriber's `after_id`: rows at or below it were delivered before this
    subscription began, so they are never re-sent, also not when a gap is filled. `last_position` (a
    conversation subscriber's) is the conversation position every event up to which has been delivered
    (or lies below the floor); None where positions do not apply.
    """

    floor_id: int = 0
    last_seq: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    last_id: int = 0
    last_position: int | None = None

    def __post_init__(self) -> None:
        self.last_id = self.floor_id

    def knows(self, run_id: str) -> bool:
        return run_id in self.last_seq

    def expect(self, run_id: str, seq: int = 0) -> None:
        """Record that `run_id` has been delivered up to `seq` (0: known, nothing delivered yet)."""
        self.last_seq[run_id] = max(seq, self.last_seq.get(run_id, 0))

    def is_duplicate(self, message: dict[str, Any]) -> bool:
        run_id, seq = str(message["run_id"]), int(message["seq"])
        if run_id in self.last_seq:
            return seq <= self.last_seq[run_id]
        return int(message["id"]) <= self.floor_id

    def gap_before(self, message: dict[str, Any]) -> tuple[int, int] | None:
        """`(after_seq, before_seq)` of events missing before this live message, or None."""
        run_id, seq = str(message["run_id"]), int(message["seq"])
        last = self.last_seq.get(run_id)
        if last is None:
            return (0, seq) if seq > 1 else None
        return (last, seq) if seq > last + 1 else None

    def take(self, message: dict[str, Any]) -> bool:
        """Whether `message` is to be delivered (not a duplicate); the cursor then counts it as delivered."""
        if self.is_duplicate(message):
            return False
        self.advance(message)
        return True

    def advance(self, message: dict[str, Any]) -> None:
        run_id = str(message["run_id"])
        self.last_seq[run_id] = max(int(message["seq"]), self.last_seq.get(run_id, 0))
        self.last_id = max(self.last_id, int(message["id"]))
        position = message.get("position")
        if position is not None and self.last_position is not None:
            self.last_position = max(self.last_position, int(position))
        if message.get("event", {}).get("type") in TERMINAL_RESULT_TYPES:
            self.finished.add(run_id)

    def position_gap(self, message: dict[str, Any]) -> bool:
        """Whether events of the conversation lie between what was delivered and this live message."""
        position = message.get("position")
        if position is None or self.last_position is None:
            return False
        return int(position) > self.last_position + 1


ReplayRead = Callable[[str, int, int | None, int], Awaitable[list[dict[str, Any]]]]
"""`(run_id, after_seq, before_seq, min_id)` → one page of a run's persisted `run.event` messages, in seq
order: `run_events_range` of the subscriber's workspace, read the way the subscriber reads (SSE or socket)."""


async def run_replay(
    cursor: RunCursor, read: ReplayRead, run_id: str, *, before_seq: int | None = None, min_id: int | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The persisted events of `run_id` after what the cursor delivered (and before `before_seq`), page by
    page, each one the cursor has not seen. `min_id` defaults to the cursor's floor."""
    after_seq = cursor.last_seq.get(run_id, 0)
    floor = cursor.floor_id if min_id is None else min_id
    while True:
        rows = await read(run_id, after_seq, before_seq, floor)
        for message in rows:
            after_seq = int(message["seq"])
            if cursor.take(message):
                yield message
        if len(rows) < REPLAY_PAGE_SIZE:
            return


async def live_event(cursor: RunCursor, read: ReplayRead, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """What one live `run.event` means for a subscriber, in order: nothing for a duplicate; otherwise the
    persisted events the channel layer dropped before it (a gap), then the message itself."""
    if cursor.is_duplicate(message):
        return
    if cursor.gap_before(message) is not None:
        async for missed in run_replay(cursor, read, str(message["run_id"]), before_seq=int(message["seq"])):
            yield missed
    if cursor.take(message):
        yield message


async def live_status(cursor: RunCursor, read: ReplayRead, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """What must reach a subscriber before a live `run.status`: when a followed run ended without its terminal
    result reaching the subscriber, the rest of its persisted events."""
    run_id = str(message["run_id"])
    if message.get("status") in TERMINAL_STATUSES and cursor.knows(run_id) and run_id not in cursor.finished:
        async for missed in run_replay(cursor, read, run_id):
            yield missed


ConversationRead = Callable[[int, int | None], Awaitable[list[dict[str, Any]]]]
"""`(after_position, before_position)` → one page of a conversation's persisted `run.event` messages, in
position order: `conversation_events_between` of the subscriber's workspace and conversation."""


async def conversation_replay(
    cursor: RunCursor, read: ConversationRead, *, before_position: int | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The conversation's persisted events after the cursor's position (and before `before_position`), in
    position order, each one the cursor has not seen."""
    assert cursor.last_position is not None
    after = cursor.last_position
    while True:
        rows = await read(after, before_position)
        for message in rows:
            after = int(message["position"])
            if cursor.take(message):
                yield message
            # Seen before (a run replayed from its start): delivered all the same, so the position is passed.
            cursor.last_position = max(cursor.last_position, after)
        if len(rows) < REPLAY_PAGE_SIZE:
            return


async def live_conversation_event(
    cursor: RunCursor, read: ReplayRead, read_conversation: ConversationRead, message: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """`live_event` for a conversation subscriber: events pass in position order, so the events of other
    runs published later than this one (or dropped) come first (the module docstring says why)."""
    if cursor.is_duplicate(message):
        return
    if cursor.position_gap(message):
        async for missed in conversation_replay(cursor, read_conversation, before_position=int(message["position"])):
            yield missed
    elif cursor.gap_before(message) is not None:
        async for missed in run_replay(cursor, read, str(message["run_id"]), before_seq=int(message["seq"])):
            yield missed
    if cursor.take(message):
        yield message


async def live_conversation_status(
    cursor: RunCursor, read: ReplayRead, read_conversation: ConversationRead, message: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """`live_status` for a conversation subscriber: a followed run that ended without its terminal result
    reaching the subscriber is caught up with the whole conversation, in position order."""
    run_id = str(message["run_id"])
    if message.get("status") not in TERMINAL_STATUSES or not cursor.knows(run_id) or run_id in cursor.finished:
        return
    if cursor.last_position is not None:
        async for missed in conversation_replay(cursor, read_conversation):
            yield missed
    async for missed in run_replay(cursor, read, run_id):
        yield missed


def client_event(message: dict[str, Any]) -> dict[str, Any]:
    """A `run.event` as a chat client sees it (docs/architecture.md, "Live delivery"): the position stays on the
    server."""
    return {k: message[k] for k in ("type", "id", "run_id", "seq", "event")}


def conversation_now(*, workspace_id: int, conversation_id: str) -> tuple[int, int, list[str]]:
    """Where a subscription without a cursor starts: the id of the conversation's newest persisted run
    event (0 when there is none), the conversation's position then, and the run ids of its queued or
    running runs, oldest first.

    One statement (`runners.sql.conversation_now`), because every chat message to a new conversation waits
    for it on the web process's one sync thread.
    """
    rows = conversation_now_statement(workspace_id=workspace_id, conversation_id=conversation_id).fetchall()
    floor = int(rows[0][1] or 0)
    position = next((int(value or 0) for kind, value, _ in rows if kind == 2), 0)
    return floor, position, [str(uuid.UUID(str(run_id))) for kind, _, run_id in rows if kind == 1]
