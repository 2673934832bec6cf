"""One run on the worker's loop: the runtime call, the result pipeline and the ways a run is stopped.

Two coroutines per run. The reader drains the `run_agent` stream into an inbox. The writer takes what
is in the inbox, normalizes it (`normalizer.py`), persists it (`ledger.py`, fenced by the lease) and
only then publishes it (`publish.py`). Deltas are never held back by a timer: the writer takes everything
in the inbox at once, so the first delta after a quiet moment is written and published as soon as it
arrives, and only what came in while the previous write and its publication were in flight is merged
(group commit: consecutive text deltas of one role become one, up to `DELTA_MERGE_MAX_CHARS`). Under load
a write carries more; when idle, nothing waits. Anything else flushes the deltas first, so the order of a
run's events never changes.

A run ends exactly once, by the first terminal result the writer takes: the runner's own, or one the
host puts into the inbox — host deadline (`runner.timeout`), a cancel the runner did not answer within
the cancel grace (`cancelled`), worker shutdown (`worker_shutdown`, retryable), a stream that ended
without a terminal result (`runner.invalid_result`) or a lost runtime connection (`runtime_error`,
retryable). A lost lease ends it without any write at all.

A run of a runner that declares `steering` may be handed more messages while it runs (`steer`): the worker
sends each to the runtime with `run_input`, one at a time in order, and a message the runner never took
gets a run of its own (`steering.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings

from bindings.policies import ConcurrencyPolicy
from foundation.tracing import span
from langbot_sdk.protocol import (
    AgentAPIError,
    AgentAPIException,
    ArtifactCreatedPayload,
    ErrorCode,
    ResultType,
    RunFailedPayload,
    RunFailureCode,
    StateUpdatedPayload,
)
from runners.access.usage import usage_with_host
from runners.actions.delivery import run_results_observe
from runners.live.publish import run_end_publish_committed, run_events_publish_committed, run_status_publish_committed
from runners.metrics import RUN_DURATION
from runners.orchestrator.admission import ClaimedRun
from runners.orchestrator.ledger import (
    ArtifactOutput,
    AssistantReply,
    Batch,
    LeaseLostError,
    StateUpdate,
    artifact_event_data,
    ledger_append,
    ledger_finish,
)
from runners.orchestrator.normalizer import Accepted, ResultNormalizer, delta_merge, delta_text, message_of, outcome_of
from runners.orchestrator.steering import steered_inputs_pending, steered_inputs_requeue

if TYPE_CHECKING:
    from foundation.sql import DatabaseExecutor, LoopStatements
    from runtimes.hosts import RunnerHosts

logger = logging.getLogger(__name__)

CANCEL_CALL_TIMEOUT = 5.0
DELTA = ResultType.MESSAGE_DELTA.value


@dataclass
class _StreamEnded:
    error: AgentAPIError | None


@dataclass
class _HostTerminal:
    accepted: Accepted


class _LeaseLostMarker:
    pass


_LOST = _LeaseLostMarker()


def host_failure(code: str, message: str, *, retryable: bool = False, **details: Any) -> Accepted:
    """A `run.failed` result the host produces on the runner's behalf."""
    payload = RunFailedPayload(code=code, message=message, retryable=retryable, details=details)
    return Accepted(type=ResultType.RUN_FAILED.value, data=payload.model_dump(mode="json"), payload=payload)


class RunsWorker(Protocol):
    """What a run needs from the worker that runs it (`worker.Orchestrator`): the runtimes' hosts, the
    loop's prepared statements, and a place for background work the run does not wait for. Named here so
    that this module does not import the worker, which imports it."""

    hosts: RunnerHosts
    statements: LoopStatements
    db: DatabaseExecutor

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None: ...


class RunExecution:
    def __init__(self, orchestrator: RunsWorker, claimed: ClaimedRun) -> None:
        self.orchestrator = orchestrator
        self.run = claimed.run
        self.session = claimed.built.session
        self.request = claimed.built.request
        self.runner_source = (claimed.built.runner_source, claimed.built.runner_source_key)
        self.run_id = self.session.run_id
        self.lease_token = claimed.lease_token
        self.last_seq = claimed.run.last_seq
        self.deadline_at = claimed.run.deadline_at.timestamp() if claimed.run.deadline_at else time.time()
        self.normalizer = ResultNormalizer(self.run_id)
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.finished = False
        self.cancel_reason: str | None = None
        self._stopping = False
        self._timers: list[asyncio.TimerHandle] = []
        self._completed: tuple[str, list[dict[str, Any]]] | None = None
        self._delta_text: list[str] = []
        # Steered messages (`Run.input_events` pks) sent to the runtime or given a run of their own; the
        # messages merged into the run before it started count as handled.
        self._steer_handled: set[int] = {pk for pk in claimed.run.input_events or [] if isinstance(pk, int)}
        self._steer_lock = asyncio.Lock()
        binding = claimed.run.binding if claimed.run.binding_id is not None else None
        self._ended = False  # the run's end is written
        self._steer_policy = binding is not None and binding.concurrency_policy == ConcurrencyPolicy.STEER.value
        self.trace_parent: Any = None  # where the run's trace continues on this worker (foundation/tracing.py)

    # -- stop requests (called on the loop) -----------------------------------------------------

    def request_cancel(self, reason: str) -> None:
        """A cancel request for this run: tell the runtime, and end the run ourselves if the runner has
        not answered within the cancel grace."""
        if self.finished or self.cancel_reason is not None:
            return
        self.cancel_reason = reason
        self._send_cancel(reason)
        failure = host_failure(RunFailureCode.CANCELLED.value, "the run was cancelled", reason=reason)
        self._later(settings.LANGBOT_RUN_CANCEL_GRACE, failure)

    def deadline_reached(self) -> None:
        if self.finished:
            return
        self._send_cancel("deadline")
        self._inject(
            host_failure(
                RunFailureCode.RUNNER_TIMEOUT.value,
                "the run reached its deadline",
                retryable=True,
                deadline_at=self.deadline_at,
            )
        )

    def shutdown(self) -> None:
        if self.finished:
            return
        self._send_cancel("worker shutdown")
        self._inject(host_failure("worker_shutdown", "the worker shut down during the run", retryable=True))

    def lease_lost(self) -> None:
        if self.finished:
            return
        logger.warning("run %s: lease lost; stopping without further writes", self.run_id)
        self._send_cancel("lease lost")
        self.inbox.put_nowait(_LOST)

    def _inject(self, accepted: Accepted) -> None:
        if not self.finished:
            self.inbox.put_nowait(_HostTerminal(accepted))

    def _later(self, delay: float, accepted: Accepted) -> None:
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(max(0.0, delay), self._inject, accepted))

    def _send_cancel(self, reason: str) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.orchestrator.spawn(self._cancel_call(reason))

    async def _cancel_call(self, reason: str) -> None:
        try:
            await self.orchestrator.hosts.get(*self.runner_source).cancel_run(
                self.run_id, reason, timeout=CANCEL_CALL_TIMEOUT
            )
        except AgentAPIException as exc:
            logger.info("run %s: cancel_run not delivered: %s", self.run_id, exc)

    # -- steered input ------------------------------------------------------------------------

    def steer(self) -> None:
        """More input was recorded on this run: hand it to the runtime (called on the loop)."""
        self._steer_policy = True
        self.orchestrator.spawn(self._steer_deliver())

    async def _steer_deliver(self) -> None:
        try:
            await self._steer_deliver_pending()
        except Exception:
            logger.exception("run %s: steered input not delivered", self.run_id)

    async def _steer_deliver_pending(self) -> None:
        """Send every message recorded on the run and not handled yet, in order, each once the runtime
        answered the one before (its runner took it, or never will). Once the run's end is written, what it
        did not take gets a run of its own."""
        async with self._steer_lock:
            pending = await self.orchestrator.db(
                steered_inputs_pending, run_pk=self.run.pk, handled=frozenset(self._steer_handled)
            )
            unread: list[int] = []
            host = self.orchestrator.hosts.get(*self.runner_source)
            run_input = getattr(host, "run_input", None)
            for item in pending:
                self._steer_handled.add(item.event_pk)
                accepted = False
                if not self.finished and run_input is not None:
                    try:
                        timeout = max(1.0, self.deadline_at + settings.LANGBOT_RUN_DEADLINE_GRACE - time.time())
                        accepted = await run_input(self.run_id, item.event_id, item.input, timeout=timeout)
                    except Exception as exc:
                        logger.warning("run %s: run_input of event %s failed: %s", self.run_id, item.event_id, exc)
                if accepted:
                    continue
                if self._ended:
                    unread.append(item.event_pk)
                else:
                    # Not taken by a run still being written: it and the ones after it get their runs once
                    # this one has ended (a run made now could be passed over by the end's wake-up of the
                    # next queued run).
                    self._steer_handled.discard(item.event_pk)
                    break
            if unread:
                created = await self.orchestrator.db(steered_inputs_requeue, run_pk=self.run.pk, event_pks=unread)
                logger.info("run %s: %d steered message(s) not taken get runs of their own", self.run_id, len(created))

    # -- the run ------------------------------------------------------------------------------

    async def execute(self) -> None:
        loop = asyncio.get_running_loop()
        grace = settings.LANGBOT_RUN_DEADLINE_GRACE
        self._timers.append(loop.call_later(max(0.0, self.deadline_at + grace - time.time()), self.deadline_reached))
        # The runtime call starts first. `running` is queued before any result can be written, so every
        # later publication of the run leaves after it (the loop's publication queue keeps that order)
        # while the results go ahead without waiting for it to be sent.
        reader = loop.create_task(self._read(), name=f"run-reader {self.run_id}")
        running = run_status_publish_committed(run=self.run)
        try:
            await self._write()
        finally:
            self.finished = True
            for timer in self._timers:
                timer.cancel()
            reader.cancel()
            await asyncio.gather(reader, running, return_exceptions=True)

    async def _read(self) -> None:
        try:
            with span("runtime.run_agent", {"langbot.run_id": self.run_id, "langbot.runner_id": self.run.runner_id}):
                async with self.orchestrator.hosts.get(*self.runner_source).run_agent(self.request) as stream:
                    async for item in stream:
                        self.inbox.put_nowait(item)
            self.inbox.put_nowait(_StreamEnded(None))
        except asyncio.CancelledError:
            raise
        except AgentAPIException as exc:
            self.inbox.put_nowait(_StreamEnded(exc.error))
        except Exception as exc:
            logger.exception("run %s: the runtime stream failed", self.run_id)
            error = AgentAPIError(code=ErrorCode.RUNTIME_ERROR, message=f"{type(exc).__name__}: {exc}", retryable=True)
            self.inbox.put_nowait(_StreamEnded(error))

    async def _write(self) -> None:
        while True:
            items = [await self.inbox.get()]
            # What arrived while the last write and its publication were in flight goes in this one.
            while not self.inbox.empty():
                items.append(self.inbox.get_nowait())

            batch = Batch()
            deltas: list[dict[str, Any]] = []
            terminal: Accepted | None = None
            for item in items:
                if item is _LOST:
                    return
                if isinstance(item, _HostTerminal):
                    terminal = item.accepted
                    break
                if isinstance(item, _StreamEnded):
                    terminal = self._stream_end_failure(item.error)
                    break
                accepted = self.normalizer.accept(item)
                if accepted is None:
                    continue
                if accepted.type == DELTA:
                    self._delta_text.append(delta_text(accepted.data))
                    merged = delta_merge(deltas[-1], accepted.data) if deltas else None
                    if merged is not None:
                        deltas[-1] = merged
                    else:
                        deltas.append(accepted.data)
                    continue
                batch.events += [(DELTA, d) for d in deltas]
                deltas.clear()
                if accepted.is_terminal:
                    terminal = accepted
                    break
                self._absorb(accepted, batch)

            batch.events += [(DELTA, d) for d in deltas]
            if terminal is not None:
                batch.events.append((terminal.type, terminal.data))
                await self._finish(batch, terminal)
                return
            if batch and not await self._append(batch):
                return

    def _stream_end_failure(self, error: AgentAPIError | None) -> Accepted:
        if error is None:
            return host_failure(
                RunFailureCode.RUNNER_INVALID_RESULT.value,
                "the result stream ended without run.completed or run.failed",
            )
        return host_failure(
            ErrorCode.RUNTIME_ERROR.value, f"the plugin runtime failed the run: {error.message}", retryable=True,
            runtime_code=error.code,
        )  # fmt: skip

    def _absorb(self, accepted: Accepted, batch: Batch) -> None:
        payload = accepted.payload
        if isinstance(payload, StateUpdatedPayload):
            scope_key = (
                self.session.scope.state_key(payload.scope) if self.session.state_allows(payload.scope) else None
            )
            if scope_key is None:
                logger.warning(
                    "run %s: dropped state.updated for scope %s (not authorized)", self.run_id, payload.scope
                )
                return
            batch.state.append(StateUpdate(str(payload.scope), scope_key, payload.key, payload.value))
            # Also a run event, so the debug chat and `GET /runs/{id}/events` show what the runner stored.
            batch.events.append((accepted.type, accepted.data))
            return
        if isinstance(payload, ArtifactCreatedPayload):
            artifact_id = payload.artifact_id or str(uuid.uuid4())
            # The run event names the stored artifact; inline bytes stay out of the ledger.
            data = artifact_event_data(payload, artifact_id)
            batch.artifacts.append(
                ArtifactOutput(payload.name, payload.mime_type, payload.content_base64, artifact_id, event_data=data)
            )
            batch.events.append((accepted.type, data))
            return
        if accepted.type == ResultType.MESSAGE_COMPLETED.value:
            self._completed = message_of(accepted)
        batch.events.append((accepted.type, accepted.data))

    async def _append(self, batch: Batch) -> bool:
        try:
            rows = await ledger_append(
                self.orchestrator.statements,
                run=self.run,
                lease_token=self.lease_token,
                last_seq=self.last_seq,
                batch=batch,
                lease_seconds=settings.LANGBOT_LEASE_SECONDS,
            )
        except LeaseLostError:
            self.lease_lost()
            return False
        except Exception:
            # The database is unreachable: stop the runner and let the lease decide the run's fate.
            logger.exception("run %s: could not persist results; abandoning the run", self.run_id)
            self._send_cancel("host could not persist results")
            return False
        self.last_seq += len(batch.events)
        await run_events_publish_committed(run=self.run, events=rows)
        run_results_observe(run=self.run, events=rows, ended=False)
        return True

    async def _finish(self, batch: Batch, terminal: Accepted) -> None:
        outcome = outcome_of(terminal, cancel_reason=self.cancel_reason)
        # The host's own count of the model calls goes with every ending (timeout, cancel, host failure too).
        outcome.usage = usage_with_host(outcome.usage, self.session.usage)
        streamed = "".join(self._delta_text)
        reply: AssistantReply | None = None
        if self._completed is not None:
            output = self._completed[0]
            reply = AssistantReply(*self._completed)
        else:
            output = streamed
            if outcome.status == "completed" and streamed:
                reply = AssistantReply(streamed, [])
        try:
            rows = await ledger_finish(
                self.orchestrator.statements,
                run=self.run,
                lease_token=self.lease_token,
                last_seq=self.last_seq,
                batch=batch,
                outcome=outcome,
                output=output,
                reply=reply,
            )
        except LeaseLostError:
            self.lease_lost()
            return
        except Exception:
            logger.exception("run %s: could not persist its end; the lease will expire", self.run_id)
            return
        self.finished = True
        self.last_seq += len(batch.events)
        self._ended = True
        if self._steer_policy:
            # The run is over: a message recorded on it that it never took gets a run of its own.
            self.orchestrator.spawn(self._steer_deliver())
        if self.run.started_at is not None and self.run.finished_at is not None:
            seconds = (self.run.finished_at - self.run.started_at).total_seconds()
            RUN_DURATION.labels(self.run.runner_id, outcome.status).observe(max(0.0, seconds))
        await run_end_publish_committed(run=self.run, events=rows)
        run_results_observe(run=self.run, events=rows, ended=True)
        logger.info(
            "run %s %s%s", self.run_id, outcome.status, f" ({outcome.status_reason})" if outcome.status_reason else ""
        )
