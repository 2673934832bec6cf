"""Chat bursts through the real plugin runtime and Celery worker: `parallel` really runs two runs of one
conversation at once, `merge` makes one run (one reply) of a burst, and `interrupt` leaves a runner that
declares no `interrupt` running and queues the newer message; `steer` hands a message to the running run
of a runner that declares `steering` (one run, whose answer shows it), gives a message that run never read a
run of its own, and queues for a runner that does not declare it."""

from __future__ import annotations

import pytest
from tenacity import Retrying, stop_after_delay, wait_fixed

from runners.lifecycle.services import QUEUED_NO_INTERRUPT, QUEUED_NO_STEERING
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


def test_steer_hands_a_message_to_the_running_run_which_answers_it(worker, qa_binding):
    binding = qa_binding(concurrency_policy="steer")
    first = post_message(binding, "qa:steer:4 one")
    wait_status(first, Run.Status.RUNNING)
    steered = post_message(binding, "two")
    assert steered.pk == first.pk  # no run of its own
    run = wait_terminal(first, timeout=30)
    assert run.status == Run.Status.COMPLETED
    assert run.output == "QA_STEER:one + two"
    assert run.input_events == [TranscriptItem.objects.get(content="two").event_id]  # the steered event's pk
    assert Run.objects.filter(binding=binding).count() == 1
    # The run's events show the steered message arriving while it ran.
    deltas = [e.data["chunk"]["content"] for e in run.events.filter(type="message.delta")]
    assert deltas == ["[got: two] "]


def test_a_steered_message_the_run_never_reads_gets_a_run_of_its_own(worker, qa_binding):
    binding = qa_binding(concurrency_policy="steer")
    first = post_message(binding, "qa:slow:2 one")
    wait_status(first, Run.Status.RUNNING)
    assert post_message(binding, "two").pk == first.pk
    first = wait_terminal(first, timeout=30)
    assert first.output == "QA_SLOW:one"
    # (Found by its binding, not by its "queued: …" reason: a quick run has already replaced it with its end.)
    own = wait_terminal(wait_for_other_run(binding, first), timeout=30)
    first.refresh_from_db()
    assert first.input_events == []  # it was not given the message after all
    assert (own.status, own.output) == (Run.Status.COMPLETED, "QA_OK:two")
    assert own.started_at >= first.finished_at


def test_steer_queues_for_a_runner_that_does_not_declare_steering(worker, qa_binding, qa_report):
    from runtimes.descriptors import runner_descriptors_sync

    binding = qa_binding(concurrency_policy="steer")
    report = qa_report.model_copy(deep=True)
    for manifest in report.runners:
        manifest.capabilities.steering = False
    runner_descriptors_sync(report=report)
    try:
        first = post_message(binding, "qa:steer:2 one")
        wait_status(first, Run.Status.RUNNING)
        second = post_message(binding, "two")
        assert second.pk != first.pk
        assert second.status_reason == QUEUED_NO_STEERING
        first, second = wait_terminal(first, timeout=30), wait_terminal(second, timeout=30)
        assert first.output == "QA_STEER:one"
        assert second.output == "QA_OK:two"
        assert second.started_at >= first.finished_at
    finally:
        runner_descriptors_sync(report=qa_report)


def wait_for_other_run(binding, first: Run, timeout: float = 30) -> Run:
    for attempt in Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.1), reraise=True):
        with attempt:
            return Run.objects.exclude(pk=first.pk).get(binding=binding)
    raise AssertionError("unreachable")
