"""Cancellation, concurrency policies, duplicate deliveries, a killed worker and a stopped worker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from runners.lifecycle.services import run_cancel_request, runs_sweep
from runners.models import Run, RunEvent
from runners.tasks import run_execute
from tests.processes import LEASE_SECONDS, post_message, wait_status, wait_terminal
from transcripts.models import TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def private_queue(start_worker) -> Iterator[object]:
    """A worker of its own on a queue of its own (tests that kill or stop it)."""
    from langbot_host.celery import app

    queue = f"langbot-test-private-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    worker = start_worker(CELERY_TASK_DEFAULT_QUEUE=queue)
    app.conf.task_default_queue = queue
    yield worker
    app.conf.task_default_queue = previous
    worker.kill()


def test_cancel_stops_a_running_run_with_the_reason(worker, qa_binding):
    run = post_message(qa_binding(), "qa:slow:30 zz")
    wait_status(run, Run.Status.RUNNING)
    run_cancel_request(run=run, reason="user pressed stop")
    run = wait_terminal(run, timeout=15)
    assert run.status == Run.Status.CANCELLED
    assert run.status_reason == "user pressed stop"
    assert run.error["code"] == "cancelled"
    assert [e.type for e in RunEvent.objects.filter(run=run)] == ["run.failed"]


def test_cancel_is_idempotent_and_leaves_finished_runs_alone(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "hello"))
    again = run_cancel_request(run=run, reason="too late")
    assert again.status == Run.Status.COMPLETED
    assert again.cancel_requested_at is None


def test_queue_policy_runs_messages_of_a_conversation_one_after_another(worker, qa_binding):
    binding = qa_binding(concurrency_policy="queue")
    first = post_message(binding, "qa:slow:1 one")
    second = post_message(binding, "two")
    other = post_message(binding, "elsewhere", conversation_id="conv-other")
    wait_status(first, Run.Status.RUNNING)
    second.refresh_from_db()
    assert second.status == Run.Status.QUEUED
    first, second, other = (wait_terminal(r) for r in (first, second, other))
    assert (first.status, second.status, other.status) == ("completed", "completed", "completed")
    assert second.started_at >= first.finished_at
    assert other.started_at < first.finished_at


def test_cancelling_a_queued_run_ends_it_at_once_and_lets_the_next_one_run(worker, qa_binding):
    binding = qa_binding(concurrency_policy="queue")
    first = post_message(binding, "qa:slow:1 one")
    second = post_message(binding, "two")
    third = post_message(binding, "three")
    second = run_cancel_request(run=second, reason="never mind")
    assert second.status == Run.Status.CANCELLED
    assert second.status_reason == "never mind"
    assert wait_terminal(first).status == Run.Status.COMPLETED
    assert wait_terminal(third).output == "QA_OK:three"


def test_interrupt_policy_cancels_the_active_run_for_the_newer_message(worker, qa_binding):
    binding = qa_binding(concurrency_policy="interrupt")
    first = post_message(binding, "qa:slow:30 one")
    wait_status(first, Run.Status.RUNNING)
    second = post_message(binding, "two")
    first, second = wait_terminal(first, timeout=15), wait_terminal(second, timeout=15)
    assert first.status == Run.Status.CANCELLED
    assert first.status_reason == "interrupted by a newer message"
    assert second.status == Run.Status.COMPLETED
    assert second.output == "QA_OK:two"


def test_reject_policy_refuses_a_message_while_a_run_is_active(worker, qa_binding):
    binding = qa_binding(concurrency_policy="reject")
    first = post_message(binding, "qa:slow:30 one")
    second = post_message(binding, "two")
    assert second.status == Run.Status.FAILED
    assert second.status_reason == "rejected"
    assert second.error["code"] == "conversation.busy"
    run_cancel_request(run=first, reason="cleanup")
    assert wait_terminal(first).status == Run.Status.CANCELLED
    second.refresh_from_db()
    assert second.started_at is None
    assert RunEvent.objects.filter(run=second).count() == 0


def test_the_same_task_delivered_twice_executes_once(worker, qa_binding):
    run = post_message(qa_binding(), "qa:slow:1 once")
    sent = [run_execute.delay(str(run.run_id)).id, run_execute.delay(str(run.run_id)).id]
    run = wait_terminal(run)
    sent.append(run_execute.delay(str(run.run_id)).id)  # and once more after it finished
    worker.wait_for_log(*(f"run_execute[{task_id}] succeeded" for task_id in sent))
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert run.attempts == 1
    assert [e.type for e in RunEvent.objects.filter(run=run)] == ["message.completed", "run.completed"]
    assert TranscriptItem.objects.filter(run_id=run.run_id, role="assistant").count() == 1


def test_killed_worker_leaves_a_worker_lost_run_and_no_reply(private_queue, qa_binding):
    # given a run in flight on a worker
    run = post_message(qa_binding(), "qa:slow:30 doomed")
    wait_status(run, Run.Status.RUNNING)
    # when the worker is killed outright and the sweeper runs after the lease expired
    private_queue.kill()
    deadline = time.monotonic() + LEASE_SECONDS + 10
    while time.monotonic() < deadline:
        runs_sweep()
        run.refresh_from_db()
        if run.is_terminal:
            break
        time.sleep(0.5)
    # then the run failed as worker_lost (retryable) and no reply was written
    assert run.status == Run.Status.FAILED
    assert run.status_reason == "worker_lost"
    assert (run.error["code"], run.error["retryable"]) == ("worker_lost", True)
    assert TranscriptItem.objects.filter(run_id=run.run_id, role="assistant").count() == 0


def test_stopped_worker_ends_its_runs_instead_of_leaving_them_running(private_queue, qa_binding):
    run = post_message(qa_binding(), "qa:slow:30 interrupted")
    wait_status(run, Run.Status.RUNNING)
    private_queue.stop()
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.status_reason == "worker_shutdown"
    assert run.error["retryable"] is True


def test_runs_left_queued_too_long_are_sent_again(worker, qa_binding, settings):
    # given a queued run whose broker message was lost
    from django.utils import timezone

    binding = qa_binding()
    run = Run.objects.create(
        workspace=binding.workspace,
        event=post_message(binding, "qa:empty").event,
        binding=binding,
        binding_key=binding.binding_id,
        runner_id=binding.runner_id,
        conversation_id="conv-lost",
    )
    # when the sweeper runs after the stale threshold
    result = runs_sweep(now=timezone.now() + timedelta(seconds=settings.LANGBOT_QUEUED_STALE_SECONDS + 1))
    # then the run is sent again and executes
    assert str(run.run_id) in result.redispatched
    assert wait_terminal(run).status == Run.Status.COMPLETED
