"""The per-process run orchestrator of a Celery worker (docs/architecture.md, "Runs").

One `Orchestrator` per worker process owns: the asyncio loop thread and the one multiplexed runtime
connection of `runtimes.link.RuntimeLink`, the proxy handlers registered on that connection, a
database executor for the loop and the loop's own statement pool (result writes), the runs in flight
(bounded by `LANGBOT_WORKER_MAX_RUNS`), the lease heartbeat, the cancel listener and the steer listener
(more input for a running run).

`run_admit` (called by the `run_execute` task thread for each run of its message) waits for a free slot —
a full process stops taking messages, which pushes back on the queue — claims the run
(`admission.run_claim`), hands its coroutine to the loop and returns: from then on the lease, not the
Celery ack, owns the run's fate.

Worker shutdown stops admitting (new deliveries are rejected back to the queue), gives the runs in
flight `LANGBOT_WORKER_SHUTDOWN_GRACE` seconds, then ends the rest `failed`/`worker_shutdown`
(retryable) after sending `cancel_run` — a run is never left `running` by a clean stop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Coroutine
from functools import partial
from typing import Any

from celery.exceptions import Reject
from django.conf import settings
from django.db import connection

from foundation.log_context import log_context, log_context_set
from foundation.sql import DatabaseExecutor, LoopStatements
from foundation.tracing import run_claimed, run_executing
from runners.access.audit import AuditLog
from runners.access.proxy import proxy_handlers_for_worker
from runners.access.session import RunSession
from runners.actions.delivery import deliveries_drain, run_results_observe
from runners.live.cancel import CancelListener
from runners.live.steer import SteerListener
from runners.models import Run, RunEvent
from runners.orchestrator.admission import run_claim
from runners.orchestrator.execution import RunExecution
from runners.orchestrator.ledger import leases_renew
from runtimes.hosts import RunnerHosts
from runtimes.link import RuntimeLink, runtime_link

logger = logging.getLogger(__name__)

_SLOT_WAIT_SECONDS = 1.0
# On SQLite the worker keeps each thread's connection this long (Django's CONN_MAX_AGE) instead of opening
# one — file, WAL pragmas — for every claim and every result write. Its threads are few and fixed (the
# Celery pool, the database executor); the web process, with a thread per request, keeps closing them.
# Measured through HTTP (bench/README.md, issue 19), before → after: sequential runs p50 59-79 → 21-25 ms,
# 100 token streams p50 245-290 → 57-88 ms (their p99 not better). PostgreSQL connections are pooled.
SQLITE_CONN_MAX_AGE = 600


def sqlite_connections_keep() -> None:
    if connection.vendor == "sqlite":
        connection.settings_dict["CONN_MAX_AGE"] = SQLITE_CONN_MAX_AGE


class Orchestrator:
    def __init__(self, link: RuntimeLink) -> None:
        self.link = link
        self.loop = link.loop
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        sqlite_connections_keep()
        self.db = DatabaseExecutor(settings.LANGBOT_WORKER_DB_THREADS)
        self.statements = LoopStatements(self.db, settings.LANGBOT_WORKER_DB_THREADS)
        self.max_runs = settings.LANGBOT_WORKER_MAX_RUNS
        self.slots = threading.BoundedSemaphore(self.max_runs)
        self.executions: dict[str, RunExecution] = {}
        self.by_token: dict[str, RunExecution] = {}
        self.admitting = True
        self._background: set[asyncio.Task[Any]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._listener: CancelListener | None = None
        self._steer_listener: SteerListener | None = None
        self.audit = AuditLog(self.db)
        handlers = proxy_handlers_for_worker(sessions=self.session_of, db=self.db, audit=self.audit)
        link.register_handlers(handlers)
        self.hosts = RunnerHosts(link, handlers)
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=60)

    # -- loop side ------------------------------------------------------------------------------

    async def _start(self) -> None:
        await self.statements.open()
        self._heartbeat = asyncio.get_running_loop().create_task(self._beat(), name="run-lease-heartbeat")
        self._listener = CancelListener(self._on_cancel)
        self._listener.start()
        self._steer_listener = SteerListener(self._on_steer)
        self._steer_listener.start()
        if settings.LANGBOT_LANGBOT_RUNTIME_URL:
            # This process holds LangBot's control connection: its runtime keeps plugins up only while one is open.
            from runtimes.langbot.catalog import langbot_connection_hold

            self.spawn(langbot_connection_hold(self.hosts))
        try:
            await self.link.connection()
        except Exception:
            logger.warning("plugin runtime not reachable yet; runs will retry the connection", exc_info=True)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def session_of(self, run_token: str) -> tuple[RunSession, float] | None:
        """The run a proxy call's token was issued to, while that run is active here."""
        execution = self.by_token.get(run_token)
        if execution is None or execution.finished:
            return None
        return execution.session, execution.deadline_at

    def _on_cancel(self, run_id: str, reason: str) -> None:
        execution = self.executions.get(run_id)
        if execution is not None:
            execution.request_cancel(reason)

    def _on_steer(self, run_id: str, event_pk: int) -> None:
        # The event is read from the run's row, not from the message: any worker may hear it.
        execution = self.executions.get(run_id)
        if execution is not None:
            execution.steer()

    async def _beat(self) -> None:
        """Renew the leases of every run held here in one update; act on lost leases and cancels."""
        while True:
            await asyncio.sleep(settings.LANGBOT_LEASE_RENEW_SECONDS)
            held = {e.run.pk: e for e in self.executions.values() if not e.finished}
            if not held:
                continue
            try:
                rows = await self.db(
                    leases_renew,
                    tokens={pk: e.lease_token for pk, e in held.items()},
                    lease_seconds=settings.LANGBOT_LEASE_SECONDS,
                )
            except Exception:
                logger.warning("lease renewal failed; retrying at the next beat", exc_info=True)
                continue
            for pk, execution in held.items():
                row = rows.get(pk)
                if row is None:
                    execution.lease_lost()
                elif row[0]:
                    execution.request_cancel(row[1] or "cancelled")

    async def _run(self, execution: RunExecution) -> None:
        self.executions[execution.run_id] = execution
        self.by_token[execution.session.run_token] = execution
        execution.task = asyncio.current_task()
        # This task, and the reader and publications it starts, log as this run.
        log_context_set(run_id=execution.run_id, workspace=execution.session.scope.workspace)
        try:
            with run_executing(execution.run_id, execution.trace_parent):
                await execution.execute()
        except Exception:
            logger.exception("run %s: execution failed", execution.run_id)
        finally:
            self.executions.pop(execution.run_id, None)
            self.by_token.pop(execution.session.run_token, None)
            self.slots.release()

    async def _shutdown(self, grace: float) -> None:
        tasks = [e.task for e in self.executions.values() if e.task is not None]
        if tasks:
            logger.info("worker stopping: %d run(s) in flight get %.0fs to finish", len(tasks), grace)
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for execution in list(self.executions.values()):
                execution.shutdown()
            if pending:
                await asyncio.wait(pending, timeout=10)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._listener is not None:
            await self._listener.stop()
        if self._steer_listener is not None:
            await self._steer_listener.stop()
        if self._background:
            await asyncio.wait(list(self._background), timeout=2)
        # A reply still being edited on a chat platform gets to show its final text.
        await deliveries_drain(timeout=grace)
        # Audit rows are batched; the last batch must not die with the process.
        await self.audit.flush()
        await self.hosts.aclose()
        await self.statements.close()

    # -- task-thread side -----------------------------------------------------------------------

    def admit(self, run_id: str) -> None:
        if not self.admitting:
            raise Reject("worker is shutting down", requeue=True)
        while not self.slots.acquire(timeout=_SLOT_WAIT_SECONDS):
            if not self.admitting:
                raise Reject("worker is shutting down", requeue=True)
        handed = False
        try:
            # The task thread is reused for other runs: the context ends with the claim.
            claim_started = time.time_ns()
            with log_context(run_id=str(run_id), workspace="-"):
                claimed = run_claim(
                    run_id=run_id,
                    owner=self.owner,
                    lease_seconds=settings.LANGBOT_LEASE_SECONDS,
                    on_refused=self._refused,
                )
            if claimed is None:
                return
            execution = RunExecution(self, claimed)
            execution.trace_parent = run_claimed(
                run_id=str(run_id),
                trace_id=claimed.run.trace_hex,
                created_at=claimed.run.created_at.timestamp(),
                claim_started_ns=claim_started,
                claim_ended_ns=time.time_ns(),
            )
            asyncio.run_coroutine_threadsafe(self._run(execution), self.loop)
            handed = True
        finally:
            if not handed:
                self.slots.release()

    def _refused(self, run: Run, events: list[RunEvent]) -> None:
        # A run refused at admission (over budget) never reaches the loop as an execution; its result still
        # goes to platform delivery, which lives on the loop.
        self.loop.call_soon_threadsafe(partial(run_results_observe, run=run, events=events, ended=True))

    def shutdown(self) -> None:
        self.admitting = False
        grace = settings.LANGBOT_WORKER_SHUTDOWN_GRACE
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(grace), self.loop).result(
                timeout=grace + settings.LANGBOT_RUN_CANCEL_GRACE + 15
            )
        except Exception:
            logger.exception("worker shutdown did not finish cleanly")
        self.db.shutdown()

    @property
    def in_flight(self) -> int:
        return len(self.executions)


_orchestrator: Orchestrator | None = None
_orchestrator_pid: int | None = None
_lock = threading.Lock()


def orchestrator() -> Orchestrator:
    """This process's orchestrator, started on first use (and again in a forked child)."""
    global _orchestrator, _orchestrator_pid
    with _lock:
        if _orchestrator is None or _orchestrator_pid != os.getpid():
            _orchestrator = Orchestrator(runtime_link())
            _orchestrator_pid = os.getpid()
        return _orchestrator


def orchestrator_start() -> None:
    orchestrator()


def orchestrator_shutdown() -> None:
    global _orchestrator
    with _lock:
        current, _orchestrator = _orchestrator, None
    if current is not None and _orchestrator_pid == os.getpid():
        current.shutdown()
        current.link.close()


def run_admit(*, run_id: str) -> None:
    """Claim `run_id` and start it on this process's loop; a no-op when it is not claimable."""
    orchestrator().admit(run_id)


def runs_admit(*, run_ids: list[str]) -> None:
    """`run_admit` for each run of one message, in order. A worker stopping part-way rejects the message
    back to the queue: its runs admitted already are then found claimed and skipped."""
    current = orchestrator()
    for run_id in run_ids:
        current.admit(run_id)
