"""Where a chat subscription without a cursor starts: after the conversation's newest persisted event, with
its runs in progress to replay."""

from __future__ import annotations

import pytest

from runners.live.streaming import conversation_now
from runners.models import Run
from tests.factories import WorkspaceFactory
from tests.streaming.conftest import make_run, persist

pytestmark = pytest.mark.django_db


def test_a_new_conversation_starts_at_zero_with_nothing_to_replay():
    workspace = WorkspaceFactory.create()
    persist(make_run(workspace, conversation_id="other"), "message.delta")

    assert conversation_now(workspace_id=workspace.pk, conversation_id="new") == (0, 0, [])


def test_the_start_is_the_conversations_newest_event_and_its_active_runs_oldest_first():
    # Given a conversation with a finished run, two runs in progress and events in each,
    workspace = WorkspaceFactory.create()
    finished = make_run(workspace, status=Run.Status.COMPLETED)
    first, second = make_run(workspace), make_run(workspace, status=Run.Status.QUEUED)
    persist(first, "message.delta")
    newest = persist(finished, "message.completed", "run.completed")[-1]
    # and later events of the same conversation name in another conversation and another workspace
    persist(make_run(workspace, conversation_id="other"), "message.delta")
    persist(make_run(WorkspaceFactory.create()), "message.delta")

    floor, _, active = conversation_now(workspace_id=workspace.pk, conversation_id="conv-1")

    assert floor == newest.id
    assert active == [str(first.run_id), str(second.run_id)]
