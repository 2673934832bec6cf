"""Exact resume of a chat socket while several runs stream into one conversation (issue 22, docs/architecture.md, "Live
delivery").

Two runs of one conversation write their results at the same time, as two workers would: real
transactions on PostgreSQL, each batch written by the ledger's own statements (the one statement or the
ORM steps), published after commit through the one publish door. One writer may hold its
transaction open after inserting while the other writes: without ordering, the second would take higher
ids and commit first. The client reads a drawn number of what is on its socket, drops the connection at
drawn points, and resumes with `after_id` = the last id it received. Whatever the cuts, it receives every
event exactly once, each run's in seq order, and ids only ever rise (so its cursor never skips a row).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import example, given
from hypothesis import strategies as st

from runners.live.publish import run_event_publish_on_commit
from runners.models import Run, RunEvent
from runners.orchestrator.ledger import Batch, _write_orm
from runners.sql import ledger_write
from tests.fuzzing import fuzz_settings
from tests.streaming.conftest import ORIGIN, next_json, open_socket, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

WAIT_SECONDS = 5.0


@dataclass
class Round:
    """One batch of `first` (0 or 1), then, when `other` is set, one of the other run; with `hold`, the first
    batch's transaction stays open until the other's write has committed or is waiting for it. The client
    then reads `read` (a share of what is committed and unread) and, with `cut`, drops and resumes."""

    first: int
    size: int
    fast: bool
    other: int
    other_fast: bool
    hold: bool
    read: float
    cut: bool


rounds = st.lists(
    st.builds(
        Round,
        first=st.integers(0, 1),
        size=st.integers(1, 3),
        fast=st.booleans(),
        other=st.integers(0, 3),
        other_fast=st.booleans(),
        hold=st.booleans(),
        read=st.floats(0, 1),
        cut=st.booleans(),
    ),
    min_size=1,
    max_size=4,
)


@dataclass
class Writer:
    """One run's worker: its batches in seq order, each in a transaction of its own."""

    run: Run
    lease_token: str
    last_seq: int = 0
    written: int = 0

    def write(self, size: int, *, fast: bool, inserted: threading.Event, release: threading.Event | None) -> None:
        events = [
            ("message.delta", {"chunk": {"role": "assistant", "content": f"{self.last_seq + i + 1} "}})
            for i in range(size)
        ]
        try:
            with transaction.atomic():
                rows = self._insert(events, fast=fast)
                run_event_publish_on_commit(run=self.run, events=rows)
                inserted.set()
                if release is not None:
                    release.wait(WAIT_SECONDS)
            self.last_seq += size
        finally:
            inserted.set()
            connection.close()

    def _insert(self, events: list[tuple[str, dict[str, Any]]], *, fast: bool) -> list[RunEvent]:
        now = timezone.now()
        if not fast:
            batch = Batch(events=events)
            return _write_orm(
                run=self.run, lease_token=self.lease_token, last_seq=self.last_seq, batch=batch, now=now,
                lease_expires_at=now + timedelta(seconds=60), end=None, item=None,
            ).events  # fmt: skip
        statement = ledger_write(
            run=self.run, lease_token=self.lease_token, first_seq=self.last_seq + 1, events=events, now=now,
            lease_expires_at=now + timedelta(seconds=60),
        )  # fmt: skip
        by_seq = {self.last_seq + 1 + i: event for i, event in enumerate(events)}
        return [
            RunEvent(id=a, run_id=self.run.pk, seq=b, type=by_seq[b][0], data=by_seq[b][1], position=position)
            for kind, a, b, _, position in statement.fetchall()
            if kind == "event"
        ]


def _start(writer: Writer, size: int, fast: bool, release: threading.Event | None) -> threading.Thread:
    """Start the writer's batch; with `release`, return once its rows are inserted (its transaction open)."""
    inserted = threading.Event()
    thread = threading.Thread(
        target=writer.write, args=(size,), kwargs={"fast": fast, "inserted": inserted, "release": release}
    )
    thread.start()
    if release is not None:
        inserted.wait(WAIT_SECONDS)
    return thread


def _waiting_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _settled(thread: threading.Thread) -> None:
    """Until the thread's write has committed, or waits for a lock another transaction holds."""
    deadline = time.monotonic() + WAIT_SECONDS
    while thread.is_alive() and not _waiting_for_a_lock() and time.monotonic() < deadline:
        time.sleep(0.005)


def _committed(conversation_id: str) -> int:
    return RunEvent.objects.filter(run__conversation_id=conversation_id).count()


@dataclass
class Client:
    """A chat client keeping the documented cursor: the `id` of the last `run.event` it received."""

    cookie: tuple[bytes, bytes]
    conversation_id: str
    fresh: bool = False
    """Without a cursor until it has one: the socket starts with the runs in progress (both are, here)."""
    received: list[dict[str, Any]] = field(default_factory=list)
    comm: Any = None

    async def connect(self) -> None:
        self.comm, connected, _ = await open_socket(self.cookie, ORIGIN)
        assert connected
        subscribe: dict[str, Any] = {"type": "subscribe", "conversation_id": self.conversation_id}
        if self.received or not self.fresh:
            subscribe["after_id"] = self.received[-1]["id"] if self.received else 0
        await self.comm.send_json_to(subscribe)
        self.pending: list[dict[str, Any]] = []
        while True:
            message = await next_json(self.comm)
            if message["type"] == "subscribed":
                break
            self.pending.append(message)

    async def read(self, count: int) -> None:
        for _ in range(count):
            message = self.pending.pop(0) if self.pending else await next_json(self.comm)
            assert message["type"] == "run.event", message
            self.received.append(message)

    async def cut(self) -> None:
        await self.comm.disconnect()
        await self.connect()


async def _scenario(cookie: tuple[bytes, bytes], runs: list[Run], plan: list[Round], fresh: bool) -> None:
    conversation_id = runs[0].conversation_id
    writers = [Writer(run, str(run.lease_token)) for run in runs]
    client = Client(cookie, conversation_id, fresh)
    await client.connect()
    for step in plan:
        first = writers[step.first]
        release = threading.Event() if step.hold and step.other else None
        held = await asyncio.to_thread(_start, first, step.size, step.fast, release)
        threads = [held]
        if step.other:
            other = writers[1 - step.first]
            threads.append(await asyncio.to_thread(_start, other, step.other, step.other_fast, None))
            await database_sync_to_async(_settled)(threads[-1])
        # A cut while the first transaction may still be open: the client has what was committed so far.
        unread = await database_sync_to_async(_committed)(conversation_id) - len(client.received)
        await client.read(int(unread * step.read))
        if step.cut:
            await client.cut()
        if release is not None:
            release.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, WAIT_SECONDS)
    expected = await database_sync_to_async(
        lambda: list(RunEvent.objects.filter(run__conversation_id=conversation_id).values_list("id", flat=True))
    )()
    try:
        await client.read(len(expected) - len(client.received))
    except TimeoutError:
        missing = sorted(set(expected) - {message["id"] for message in client.received})
        pytest.fail(f"events never delivered (ids {missing}) after receiving {[m['id'] for m in client.received]}")
    try:
        assert await client.comm.receive_nothing(timeout=0.1)
    finally:
        await client.comm.disconnect()

    ids = [message["id"] for message in client.received]
    assert sorted(ids) == sorted(expected)  # every event, exactly once
    assert ids == sorted(ids)  # in id order: a cursor never passes an event not yet received
    for writer in writers:
        seqs = [m["seq"] for m in client.received if m["run_id"] == str(writer.run.run_id)]
        assert seqs == list(range(1, writer.last_seq + 1))
    assert all(set(message) == {"type", "id", "run_id", "seq", "event"} for message in client.received)


def _parallel_runs(workspace: Any) -> list[Run]:
    from tests.streaming.conftest import make_run

    conversation_id = f"conv-{uuid.uuid4().hex[:12]}"
    runs = [make_run(workspace, conversation_id=conversation_id) for _ in range(2)]
    for run in runs:
        Run.objects.filter(pk=run.pk).update(lease_token=uuid.uuid4())
        run.refresh_from_db()
    return runs


# The case that lost an event before writers of a conversation were ordered: run 0 holds its batch open,
# run 1 writes (a higher id) meanwhile, the client takes what is committed and drops.
@example(plan=[Round(first=0, size=1, fast=True, other=1, other_fast=True, hold=True, read=1.0, cut=True)], fresh=False)
@example(
    plan=[Round(first=1, size=2, fast=False, other=2, other_fast=False, hold=True, read=0.5, cut=True)], fresh=True
)
@given(plan=rounds, fresh=st.booleans())
@fuzz_settings(max_examples=12)
def test_resume_after_any_cut_delivers_every_event_once_in_order_under_concurrent_writers(member, plan, fresh):
    user, workspace = member
    runs = _parallel_runs(workspace)
    async_to_sync(_scenario)(session_cookie(user), runs, plan, fresh)
