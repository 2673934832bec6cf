"""Sending queued runs to the workers (`runners.lifecycle.dispatch`): one message at once when nothing is
being sent, the runs that arrive during a send together in the next message, and the messages as the
worker's `run_execute` reads them on the real broker."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings

from runners.lifecycle.dispatch import Batcher, run_dispatch, runs_dispatch


class Recorder:
    """The messages a batcher sent, in order; the first one can be held in flight until released."""

    def __init__(self, *, hold_first: bool = False) -> None:
        self.sent: list[list[str]] = []
        self.in_flight = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()

    def __call__(self, run_ids: list[str]) -> None:
        self.in_flight.set()
        self.release.wait(10)
        self.sent.append(list(run_ids))


def test_a_run_dispatched_while_nothing_is_sent_goes_at_once_alone() -> None:
    recorder = Recorder()
    batcher = Batcher(recorder)
    batcher.dispatch(["a"])
    assert recorder.sent == [["a"]]
    batcher.dispatch(["b"])
    assert recorder.sent == [["a"], ["b"]]


def test_runs_dispatched_during_a_send_go_together_in_the_next_message() -> None:
    recorder = Recorder(hold_first=True)
    batcher = Batcher(recorder)
    first = threading.Thread(target=batcher.dispatch, args=(["first"],))
    first.start()
    assert recorder.in_flight.wait(5)
    # While "first" is being sent, these callers return at once: their runs wait for the sender.
    for run_id in ("second", "third", "fourth"):
        batcher.dispatch([run_id])
    assert recorder.sent == []
    recorder.release.set()
    first.join(5)
    assert recorder.sent == [["first"], ["second", "third", "fourth"]]


def test_a_message_holds_at_most_the_batch_size() -> None:
    recorder = Recorder()
    Batcher(recorder, batch_max=4).dispatch([str(i) for i in range(10)])
    assert recorder.sent == [["0", "1", "2", "3"], ["4", "5", "6", "7"], ["8", "9"]]


def test_every_run_is_sent_once_when_many_threads_dispatch_at_once() -> None:
    recorder = Recorder()
    batcher = Batcher(recorder)
    ids = [[f"{t}-{i}" for i in range(200)] for t in range(8)]

    def dispatch_all(mine: list[str]) -> None:
        for run_id in mine:
            batcher.dispatch([run_id])

    threads = [threading.Thread(target=dispatch_all, args=(mine,)) for mine in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    sent = [run_id for message in recorder.sent for run_id in message]
    assert sorted(sent) == sorted(run_id for mine in ids for run_id in mine)
    assert all(1 <= len(message) <= 16 for message in recorder.sent)


def test_a_send_that_raises_does_not_stop_the_next_dispatch() -> None:
    sent: list[list[str]] = []

    def send(run_ids: list[str]) -> None:
        if run_ids == ["boom"]:
            raise KeyboardInterrupt
        sent.append(run_ids)

    batcher = Batcher(send)
    with pytest.raises(KeyboardInterrupt):
        batcher.dispatch(["boom"])
    batcher.dispatch(["after"])
    assert sent == [["after"]]


# --- on the broker ---------------------------------------------------------------------------------------


@pytest.fixture
def private_queue() -> Iterator[str]:
    from langbot_host.celery import app

    queue = f"langbot-test-dispatch-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    yield queue
    app.conf.task_default_queue = previous
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)


def _messages(queue: str) -> list[tuple[str, Any]]:
    """(task name, first argument) of every message waiting in `queue`, oldest first."""
    raw: list[bytes] = redis.Redis.from_url(settings.CELERY_BROKER_URL).lrange(queue, 0, -1)  # type: ignore[assignment]
    found = []
    for item in reversed(raw):  # LPUSHed: the newest is first
        message = json.loads(item)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        found.append((message["headers"]["task"], args[0]))
    return found


def test_one_run_is_sent_as_older_workers_read_it_and_runs_sent_together_as_a_list(private_queue: str) -> None:
    alone, *together = (str(uuid.uuid4()) for _ in range(4))
    run_dispatch(run_id=alone)
    runs_dispatch(run_ids=together)
    assert _messages(private_queue) == [("runners.tasks.run_execute", alone), ("runners.tasks.run_execute", together)]
