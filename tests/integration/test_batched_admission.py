"""Several runs in one broker message, through a real worker, runtime, PostgreSQL and Redis: each run is
claimed and executed once, a message delivered again (or naming a run twice, one already finished or an
id that is no run) changes nothing, runs whose message was lost are re-sent together by the sweeper,
and a `?wait=` on several runs returns when all of them ended and leaves no subscription behind."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from runners.lifecycle.services import runs_sweep, runs_wait, runs_wait_async
from runners.live.publish import run_group
from runners.models import Run, RunEvent
from runners.tasks import run_execute
from tests.processes import post_message, wait_terminal
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


def _undispatched(binding: Any, text: str) -> Run:
    """A queued run whose broker message never went out (created without `run_create`'s dispatch)."""
    conversation_id = f"conv-{uuid.uuid4().hex[:8]}"
    event = EventLog.objects.create(
        workspace=binding.workspace,
        event_id=f"evt-{uuid.uuid4().hex}",
        event_type="message.received",
        source="api",
        conversation_id=conversation_id,
        actor={"actor_type": "user", "actor_id": "user-1"},
        input={"text": text},
        input_summary=text,
    )
    return Run.objects.create(
        workspace=binding.workspace,
        event=event,
        binding=binding,
        binding_key=binding.binding_id,
        runner_id=binding.runner_id,
        conversation_id=conversation_id,
    )


def _executed_once(run: Run, text: str) -> None:
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.output == f"QA_OK:{text}"
    assert run.attempts == 1
    assert [e.type for e in RunEvent.objects.filter(run=run)] == ["message.completed", "run.completed"]
    assert TranscriptItem.objects.filter(run_id=run.run_id, role="assistant").count() == 1


def test_one_message_with_several_runs_executes_each_once(worker, qa_binding):
    # given three queued runs and one that already finished
    binding = qa_binding()
    texts = ["one", "two", "three"]
    runs = [_undispatched(binding, text) for text in texts]
    finished = wait_terminal(post_message(binding, "done before"))
    ids = [str(run.run_id) for run in runs]
    # when one message names them all (one twice, and an id that is no run), and is delivered again
    batch = [*ids, ids[0], str(finished.run_id), "not-a-run-id"]
    sent = [run_execute.delay(batch).id, run_execute.delay(batch).id]
    # then every queued run ran once, the finished one was left alone, and both deliveries succeeded
    for run, text in zip(runs, texts, strict=True):
        wait_terminal(run)
        _executed_once(run, text)
    worker.wait_for_log(*(f"run_execute[{task_id}] succeeded" for task_id in sent))
    _executed_once(finished, "done before")


def test_runs_whose_message_was_lost_are_sent_again_together_and_run(worker, qa_binding):
    # given queued runs whose message was lost
    binding = qa_binding()
    texts = [f"lost {i}" for i in range(5)]
    runs = [_undispatched(binding, text) for text in texts]
    # when the sweeper runs after the stale threshold
    result = runs_sweep(now=timezone.now() + timedelta(seconds=settings.LANGBOT_QUEUED_STALE_SECONDS + 1))
    # then it re-sent them all and each ran once
    assert {str(run.run_id) for run in runs} <= set(result.redispatched)
    for run, text in zip(runs, texts, strict=True):
        wait_terminal(run)
        _executed_once(run, text)


def _subscribers(run_ids: list[str]) -> int:
    layer: Any = get_channel_layer()
    client = redis.Redis.from_url(settings.REDIS_URL)
    counts: list[int] = [client.zcard(layer._group_key(run_group(run_id))) for run_id in run_ids]  # type: ignore[misc]
    return sum(counts)


def test_waiting_on_several_runs_returns_when_all_ended_and_unsubscribes(worker, qa_binding):
    binding = qa_binding()
    runs = [post_message(binding, f"qa:slow:0.5 wait {i}", conversation_id=f"conv-w{i}") for i in range(3)]
    ids = [str(run.run_id) for run in runs]
    started = time.monotonic()
    runs_wait(run_ids=ids, timeout=30)
    assert time.monotonic() - started < 25
    for run in runs:
        run.refresh_from_db()
        assert run.status == Run.Status.COMPLETED, run.error
    assert _subscribers(ids) == 0


def test_waiting_on_the_event_loop_returns_when_all_ended_and_unsubscribes_after(worker, qa_binding):
    binding = qa_binding()
    runs = [post_message(binding, f"qa:slow:0.5 loop {i}", conversation_id=f"conv-l{i}") for i in range(3)]
    ids = [str(run.run_id) for run in runs]

    async def wait_then_count() -> int:
        await runs_wait_async(run_ids=ids, timeout=30)
        # The unsubscription finishes on the loop after the wait returned.
        for _ in range(100):
            if (left := await asyncio.to_thread(_subscribers, ids)) == 0:
                break
            await asyncio.sleep(0.02)
        return left

    assert async_to_sync(wait_then_count)() == 0
    for run in runs:
        run.refresh_from_db()
        assert run.status == Run.Status.COMPLETED, run.error
