"""Waking a worker for a queued run: the one place the web side sends work to Celery.

The task is sent by name, so this leaf module (and everything that creates or re-sends runs) does not
import the worker's code: `runners.tasks` stands on the orchestrator, which stands on the lifecycle.

Sends are grouped like a group commit (issue 19): a run dispatched while nothing is being sent goes at
once, in a message of its own; runs dispatched by other threads while that send is in flight wait in
memory and go together, in one message carrying their ids, as soon as it returns. An idle process adds
no delay; a busy one sends one message for the runs that arrived during one publish. A message for one
run carries its id alone (`args=[run_id]`), as before; a message for several carries the list. Workers
from before lists existed ignore a list (a malformed run id to them): upgrade the workers first.

One process sends one message at a time, so it keeps one producer (and one Redis client on its channel)
instead of taking a producer from Celery's pool and building a client for every publish; a forked child
starts without them.

A lost message is never fatal: the run is in the database, `queued`, and `runs_sweep` re-sends it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from celery import current_app
from django.utils import timezone

from foundation.compat.kombu import channel_client_keep
from foundation.tracing import runs_dispatched, task_headers

logger = logging.getLogger(__name__)

RUN_EXECUTE_TASK = "runners.tasks.run_execute"
# The most run ids one message carries: the worker claims a message's runs one after another on one
# task thread, so a long list would hold later runs behind earlier claims.
BATCH_MAX = 16


class Batcher:
    """Sends run ids through `send`, one call at a time per process: the ids that arrive while a call is
    in flight go together in the next one (at most `batch_max` ids per call). The thread whose call
    found nothing in flight sends, then keeps sending what arrived meanwhile until nothing is left; the
    others return at once."""

    def __init__(self, send: Callable[[list[str]], None], *, batch_max: int = BATCH_MAX) -> None:
        self._send = send
        self._batch_max = batch_max
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._sending = False

    def dispatch(self, run_ids: Iterable[str]) -> None:
        with self._lock:
            self._pending.extend(run_ids)
            if self._sending or not self._pending:
                return  # The thread sending now takes these in its next message.
            self._sending = True
        try:
            while True:
                with self._lock:
                    batch = self._pending[: self._batch_max]
                    del self._pending[: self._batch_max]
                    if not batch:
                        self._sending = False
                        return
                self._send(batch)
        except BaseException:
            # `send` logs its own failures; only an interrupt gets here. What is left stays queued in
            # the database (the sweeper re-sends it); the next dispatch sends again.
            with self._lock:
                self._sending = False
            raise


class _KeptProducer:
    """This process's one producer, taken from Celery's pool once and kept (used by one thread at a time:
    the batcher's sender). On kombu's Redis transport its channel also keeps one Redis client instead of
    building one per publish (`foundation.compat.kombu`)."""

    def __init__(self) -> None:
        self.producer: Any = None

    def get(self) -> Any:
        if self.producer is None:
            self.producer = current_app.producer_pool.acquire(block=True)
        channel_client_keep(self.producer.channel)
        return self.producer

    def drop(self) -> None:
        """Forget the producer after a failed publish; the next send takes a fresh one from the pool."""
        producer, self.producer = self.producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.release()


def _message_args(run_ids: list[str]) -> list[Any]:
    # One id alone keeps the message format older workers read.
    return [run_ids[0]] if len(run_ids) == 1 else [run_ids]


class _Dispatcher:
    def __init__(self) -> None:
        self.producer = _KeptProducer()
        self.batcher = Batcher(self._send)

    def _send(self, run_ids: list[str]) -> None:
        try:
            current_app.send_task(
                RUN_EXECUTE_TASK,
                args=_message_args(run_ids),
                producer=self.producer.get(),
                headers=task_headers(run_ids),  # the runs' dispatch spans, when traced
            )
        except Exception:
            self.producer.drop()
            logger.warning(
                "could not send run(s) %s to the broker; the sweeper will re-send them",
                ", ".join(run_ids),
                exc_info=True,
            )


_dispatcher: _Dispatcher | None = None
_dispatcher_lock = threading.Lock()


def _dispatcher_get() -> _Dispatcher:
    global _dispatcher
    if _dispatcher is None:
        with _dispatcher_lock:
            if _dispatcher is None:
                _dispatcher = _Dispatcher()
    return _dispatcher


def _forget_after_fork() -> None:
    # A forked child must not share the parent's broker sockets, nor inherit a lock or a send in flight.
    global _dispatcher, _dispatcher_lock
    _dispatcher = None
    _dispatcher_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def runs_dispatch(*, run_ids: Iterable[str]) -> None:
    """Wake workers for queued runs, several per message when they arrive together."""
    ids = [str(run_id) for run_id in run_ids]
    runs_dispatched(ids)
    _dispatcher_get().batcher.dispatch(ids)


def run_dispatch(*, run_id: str) -> None:
    """Wake a worker for a queued run. A lost message is not fatal: `runs_sweep` re-sends stale runs."""
    runs_dispatch(run_ids=[run_id])


def run_dispatch_at(*, run_id: str, eta: datetime) -> None:
    """Wake a worker for a queued run at `eta` (a run that must not start before then: the `merge` policy's
    window). A message of its own, delayed by the broker's countdown, outside the batcher (whose kept
    producer belongs to its sending thread); the worker that gets it early sends it again for the run's
    current time. Lost, it is re-sent by `runs_sweep` like any other."""
    delay = max(0.0, (eta - timezone.now()).total_seconds())
    if delay <= 0:
        run_dispatch(run_id=run_id)
        return
    try:
        runs_dispatched([run_id])
        current_app.send_task(RUN_EXECUTE_TASK, args=[run_id], countdown=delay, headers=task_headers([run_id]))
    except Exception:
        logger.warning("could not send run %s to the broker; the sweeper will re-send it", run_id, exc_info=True)
