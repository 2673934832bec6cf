"""Chat bursts through the real plugin runtime and Celery worker: `parallel` really runs two runs of one
conversation at once, `merge` makes one run (one reply) of a burst, and `interrupt` leaves a runner that
declares no `interrupt` running and queues the newer message."""

from __future__ import annotations

import pytest

from runners.lifecycle.services import QUEUED_NO_INTERRUPT
from runners.models import Run
from tests.processes import post_message, wait_status, wait_terminal
from transcripts.models import TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


def test_parallel_runs_two_runs_of_one_conversation_at_the_same_time(worker, qa_binding):
    binding = qa_binding(concurrency_policy="parallel")
    first = post_message(binding, "qa:slow:3 one")
    second = post_message(binding, "qa:slow:3 two")
    first, second = wait_terminal(first, timeout=30), wait_terminal(second, timeout=30)
    assert (first.status, second.status) == ("completed", "completed")
    # From the run ledger: each started before the other finished — both were running at once.
    assert first.started_at < second.finished_at
    assert second.started_at < first.finished_at


def test_merge_answers_a_burst_of_messages_with_one_run(worker, qa_binding):
    binding = qa_binding(concurrency_policy="merge", merge_window_seconds=2.0)
    runs = [post_message(binding, text) for text in ("one", "two", "three")]
    assert len({run.pk for run in runs}) == 1
    run = wait_terminal(runs[0], timeout=30)
    assert run.status == Run.Status.COMPLETED
    assert run.output == "QA_OK:one\ntwo\nthree"
    assert Run.objects.filter(binding=binding).count() == 1
    # The transcript still shows each message the user sent.
    users = TranscriptItem.objects.filter(conversation_id="conv-1", role=TranscriptItem.Role.USER)
    assert [item.content for item in users.order_by("id")] == ["one", "two", "three"]


def test_interrupt_queues_for_a_runner_that_declares_no_interrupt(worker, qa_binding, qa_report):
    from runtimes.descriptors import runner_descriptors_sync

    binding = qa_binding(concurrency_policy="interrupt")
    report = qa_report.model_copy(deep=True)
    for manifest in report.runners:
        manifest.capabilities.interrupt = False
    runner_descriptors_sync(report=report)
    try:
        first = post_message(binding, "qa:slow:2 one")
        wait_status(first, Run.Status.RUNNING)
        second = post_message(binding, "two")
        assert second.status_reason == QUEUED_NO_INTERRUPT
        first, second = wait_terminal(first, timeout=30), wait_terminal(second, timeout=30)
        assert first.status == Run.Status.COMPLETED  # not interrupted
        assert second.output == "QA_OK:two"
        assert second.started_at >= first.finished_at
    finally:
        runner_descriptors_sync(report=qa_report)
