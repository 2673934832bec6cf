"""A run's `run.status` (the chat socket's and the SSE stream's) says whether deltas will come: `streaming`
is null until the run starts, then false for a runner that declares `streaming: false` (the chat shows it
thinking until the whole reply), true otherwise."""

from __future__ import annotations

import pytest

from runners.live.streaming import run_status_of
from runners.models import Run
from tests.streaming.conftest import make_run

pytestmark = pytest.mark.django_db


def _streaming(run: Run) -> object:
    status = run_status_of(workspace_id=run.workspace_id, run_id=str(run.run_id))
    assert status is not None
    return status["streaming"]


def test_run_status_says_whether_the_reply_streams(workspace):
    run = make_run(workspace, status=Run.Status.QUEUED)
    assert _streaming(run) is None

    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, authorization={"delivery": {"streaming": False}})
    assert _streaming(run) is False

    Run.objects.filter(pk=run.pk).update(authorization={"delivery": {"streaming": True}})
    assert _streaming(run) is True
