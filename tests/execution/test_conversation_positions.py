"""Result writes of runs sharing a conversation take its positions 1..n, in id order, on both write paths
(the one statement on PostgreSQL, the ORM steps of any batch with side effects and of SQLite); a run without a
conversation takes none. The chat socket's exact resume rests on this (`runners.live.streaming`)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from runners.models import ConversationStream, Run, RunEvent
from runners.orchestrator.ledger import Batch, _write_orm
from runners.sql import ledger_write
from tests.factories import WorkspaceFactory, running_run

pytestmark = pytest.mark.django_db


def _append(run: Run, last_seq: int, count: int) -> None:
    events = [("message.delta", {"chunk": {"role": "assistant", "content": "x"}}) for _ in range(count)]
    now = timezone.now()
    if connection.vendor == "postgresql" and last_seq % 2:
        ledger_write(
            run=run, lease_token=str(run.lease_token), first_seq=last_seq + 1, events=events, now=now,
            lease_expires_at=now,
        ).fetchall()  # fmt: skip
    else:
        _write_orm(
            run=run, lease_token=str(run.lease_token), last_seq=last_seq, batch=Batch(events=events), now=now,
            lease_expires_at=now, end=None, item=None,
        )  # fmt: skip


def test_runs_of_one_conversation_share_its_positions_in_id_order():
    workspace = WorkspaceFactory.create()
    first, second = running_run(workspace, "c"), running_run(workspace, "c")
    elsewhere = running_run(workspace, "other")

    _append(first, 0, 2)
    _append(second, 0, 1)
    _append(first, 2, 3)
    _append(elsewhere, 0, 1)
    _append(second, 1, 2)

    rows = RunEvent.objects.filter(run__conversation_id="c").order_by("id")
    assert [row.position for row in rows] == list(range(1, 9))
    assert ConversationStream.objects.get(workspace_id=workspace.pk, conversation_id="c").last_position == 8
    assert RunEvent.objects.get(run=elsewhere).position == 1


def test_a_run_without_a_conversation_takes_no_position():
    run = running_run(WorkspaceFactory.create(), "")

    _append(run, 0, 1)
    _append(run, 1, 2)

    assert list(RunEvent.objects.filter(run=run).values_list("position", flat=True)) == [None, None, None]
    assert not ConversationStream.objects.exists()
