"""Appends of several running runs handed in at the same moment are written together, in one statement on
PostgreSQL and one transaction elsewhere (`runners.orchestrator.ledger`, "group commit across runs"), and each
run is still its own: its lease fences its events alone, its seqs are its own, and runs sharing a conversation
take that conversation's positions 1..n in id order, as a write of their own would give them. A group write
that fails is not the end of its runs: each is written again on its own."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from django.db import DatabaseError

from foundation.sql import DatabaseExecutor, LoopStatements, Statement
from runners.models import ConversationStream, Run, RunEvent
from runners.orchestrator import ledger
from runners.orchestrator.ledger import Batch, LeaseLostError, ledger_append
from tests.factories import WorkspaceFactory, running_run

# The loop's connections (PostgreSQL's pool, the executor's threads) see only what the test has committed.
pytestmark = pytest.mark.django_db(transaction=True)


def _deltas(*texts: str) -> Batch:
    return Batch(events=[("message.delta", {"chunk": {"role": "assistant", "content": t}}) for t in texts])


async def _append_together(writes: list[tuple[Run, str, int, Batch]]) -> list[Any]:
    """Every write handed in on the same turn of the loop, as runs streaming at once do."""
    statements = LoopStatements(DatabaseExecutor(1), 2)
    await statements.open()
    try:
        return await asyncio.gather(
            *(
                ledger_append(statements, run=run, lease_token=token, last_seq=last_seq, batch=batch, lease_seconds=30)
                for run, token, last_seq, batch in writes
            ),
            return_exceptions=True,
        )
    finally:
        await statements.close()


@pytest.fixture
def group_statements(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many runs each group write carried (the statement on PostgreSQL, the transaction elsewhere)."""
    sizes: list[int] = []
    build, writes = ledger.ledger_append_many, ledger._writes_orm

    def counted(**kwargs: Any) -> Statement:
        sizes.append(len(kwargs["appends"]))
        return build(**kwargs)

    def counted_writes(group: list[Any], now: Any) -> Any:
        sizes.append(len(group))
        return writes(group, now)

    monkeypatch.setattr(ledger, "ledger_append_many", counted)
    monkeypatch.setattr(ledger, "_writes_orm", counted_writes)
    return sizes


def test_runs_writing_at_once_share_one_statement_and_each_keeps_its_own_seqs_and_positions(group_statements):
    workspace = WorkspaceFactory.create()
    first, second = running_run(workspace, "c"), running_run(workspace, "c")
    alone = running_run(workspace, "")
    # The conversation already has two positioned events (a write of its own, earlier).
    ConversationStream.objects.create(workspace_id=workspace.pk, conversation_id="c", last_position=2)
    Run.objects.filter(pk=second.pk).update(last_seq=4)

    results = asyncio.run(
        _append_together([
            (first, str(first.lease_token), 0, _deltas("a", "b")),
            (second, str(second.lease_token), 4, _deltas("c")),
            (alone, str(alone.lease_token), 0, _deltas("d", "e", "f")),
        ])
    )  # fmt: skip

    assert group_statements == [3]
    assert [[(e.seq, e.data["chunk"]["content"]) for e in events] for events in results] == [
        [(1, "a"), (2, "b")],
        [(5, "c")],
        [(1, "d"), (2, "e"), (3, "f")],
    ]
    in_conversation = RunEvent.objects.filter(run__conversation_id="c").order_by("id")
    assert [(row.run_id, row.seq, row.position) for row in in_conversation] == [
        (first.pk, 1, 3), (first.pk, 2, 4), (second.pk, 5, 5),
    ]  # fmt: skip
    assert [e.id for events in results[:2] for e in events] == [row.id for row in in_conversation]
    assert ConversationStream.objects.get(workspace_id=workspace.pk, conversation_id="c").last_position == 5
    assert list(RunEvent.objects.filter(run=alone).values_list("position", flat=True)) == [None, None, None]
    assert dict(Run.objects.values_list("pk", "last_seq")) == {first.pk: 2, second.pk: 5, alone.pk: 3}
    assert Run.objects.get(pk=first.pk).lease_expires_at is not None


def test_a_run_that_lost_its_lease_writes_nothing_and_the_others_of_its_group_are_written(group_statements):
    workspace = WorkspaceFactory.create()
    kept, lost = running_run(workspace, "c"), running_run(workspace, "c")

    results = asyncio.run(
        _append_together([
            (kept, str(kept.lease_token), 0, _deltas("kept")),
            (lost, str(uuid.uuid4()), 0, _deltas("lost", "too")),  # another worker's token now
        ])
    )  # fmt: skip

    assert group_statements == [2]
    assert isinstance(results[1], LeaseLostError)
    assert [(e.seq, e.position) for e in results[0]] == [(1, 1)]
    assert not RunEvent.objects.filter(run=lost).exists()
    assert Run.objects.get(pk=lost.pk).last_seq == 0
    # The lost run took no positions: the conversation's stay without holes.
    assert ConversationStream.objects.get(workspace_id=workspace.pk, conversation_id="c").last_position == 1


def test_when_the_group_statement_fails_each_run_is_written_on_its_own(monkeypatch: pytest.MonkeyPatch, caplog):
    workspace = WorkspaceFactory.create()
    runs = [running_run(workspace, "c") for _ in range(3)]
    monkeypatch.setattr(ledger, "ledger_append_many", lambda **_: Statement("SELECT no_such_function()", ()))

    def failing(group: list[Any], now: Any) -> Any:
        raise DatabaseError("disk I/O error")

    monkeypatch.setattr(ledger, "_writes_orm", failing)

    results = asyncio.run(
        _append_together([(run, str(run.lease_token), 0, _deltas(str(i))) for i, run in enumerate(runs)])
    )

    assert [[e.data["chunk"]["content"] for e in events] for events in results] == [["0"], ["1"], ["2"]]
    assert list(RunEvent.objects.order_by("id").values_list("position", flat=True)) == [1, 2, 3]
    assert "writing each alone" in caplog.text
