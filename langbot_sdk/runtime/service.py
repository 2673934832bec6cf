"""The plugin runtime's request handlers: discovery, runs, cancellation and health, per host connection.

What belongs here: `RuntimeService` (shared by every host connection: the loaded plugins and the active
runs) and `HostSession` (one host connection: its handlers and the runs it started), the run supervision
(deadline, cancellation, runner exceptions, strict result validation, sequencing), the delivery of steered
input (`run_input`) into a run's inbox (`langbot_sdk.inputs`) and the channel that
carries a run's proxy calls back to the host that started it. Loading plugins lives in `loader.py`, the
command line in `__main__.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from langbot_sdk.inputs import RunInbox
from langbot_sdk.protocol import (
    Action,
    AgentAPIException,
    AgentRunContext,
    AgentRunRequest,
    AgentRunResult,
    ListAgentRunnersResponse,
    PingResult,
    ResultType,
    RunFailureCode,
    RunInput,
    RunInputResult,
    limits,
)
from langbot_sdk.proxy import bind_run_channel, unbind_run_channel
from langbot_sdk.runtime.loader import LoadedRunner, PluginRegistry
from langbot_sdk.wire import CallInfo, Connection, Transport

__all__ = [
    "DEFAULT_CANCEL_GRACE",
    "EXIT_OUT_OF_MEMORY",
    "RUNTIME_VERSION",
    "HostSession",
    "PluginChannel",
    "RuntimeService",
]

logger = logging.getLogger("langbot_sdk.runtime")

RUNTIME_VERSION = "0.1.0"
EXIT_OUT_OF_MEMORY = 3
"""Exit status of an isolated plugin process that reached its memory limit."""
DEFAULT_CANCEL_GRACE = 5.0
"""Seconds a cancelled (or timed-out) runner gets to stop before its run is ended without it."""
_TERMINAL = frozenset({ResultType.RUN_COMPLETED.value, ResultType.RUN_FAILED.value})
# Keeps a context.invalid result small however broken the request is.
_MAX_REPORTED_ERRORS = 20
_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


class _InvalidResultError(Exception):
    """A runner yielded something that is not a valid result; the run ends with runner.invalid_result."""

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


class PluginChannel:
    """The host channel of one run: proxy calls go over the connection that started the run, stamped with
    the identity of the plugin that provides the runner and with the run's token, whatever the runner
    itself wrote. The token never enters the runner's context; the host refuses a call whose `run_id` is
    not the token's run."""

    __slots__ = ("_connection", "_stamp", "identity")

    def __init__(self, connection: Connection, identity: str, run_token: str | None) -> None:
        self._connection = connection
        self.identity = identity
        self._stamp = {"caller_plugin_identity": identity, "run_token": run_token}

    async def call(
        self,
        action: str,
        data: dict[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        return await self._connection.call(action, {**data, **self._stamp}, timeout=timeout)

    def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        return self._connection.stream(action, {**data, **self._stamp}, timeout=timeout)


class _ActiveRun:
    """One run in flight: its supervising task and the outbox its results go through, in order.

    The outbox ends with exactly one terminal result followed by the None sentinel; anything emitted
    after that is dropped, so a runner that ignores cancellation cannot add to a run already ended.
    """

    __slots__ = (
        "cancel_reason", "cancel_requested", "finished", "inbox", "outbox", "run_id", "runner_id", "sequence",
        "steering", "task", "watchdogs",
    )  # fmt: skip

    def __init__(self, run_id: str, runner_id: str, *, steering: bool = False) -> None:
        self.run_id = run_id
        self.runner_id = runner_id
        self.steering = steering
        self.inbox = RunInbox()
        self.outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.cancel_requested = False
        self.cancel_reason: str | None = None
        self.sequence = 0
        self.finished = False
        self.watchdogs: list[asyncio.TimerHandle] = []

    def emit(self, result: dict[str, Any]) -> None:
        if self.finished:
            return
        self.sequence += 1
        result["sequence"] = self.sequence
        self.outbox.put_nowait(result)
        if result["type"] in _TERMINAL:
            self.finish()

    def finish(self) -> None:
        self.inbox.close()
        if not self.finished:
            self.finished = True
            self.outbox.put_nowait(None)
        for handle in self.watchdogs:
            handle.cancel()
        self.watchdogs.clear()

    def abandon(self, result: dict[str, Any]) -> None:
        """End the run for the host although its runner has not stopped (it ignored cancellation)."""
        if self.finished:
            return
        logger.warning(
            "run %s: runner %s did not stop within the grace period; the run is ended without it",
            self.run_id, self.runner_id,
        )  # fmt: skip
        self.emit(result)


@dataclass
class RuntimeService:
    """State shared by every host connection of one runtime process."""

    registry: PluginRegistry
    cancel_grace: float = DEFAULT_CANCEL_GRACE
    exit_on_memory_error: bool = False
    """Set in an isolated plugin process (`supervisor.py`): a runner's MemoryError means the process hit
    its memory limit, and the process exits so that its supervisor restarts it clean."""
    started_at: float = field(default_factory=time.monotonic)
    sessions: set[HostSession] = field(default_factory=set)
    _list_response: dict[str, Any] | None = None

    @property
    def runs_active(self) -> int:
        return sum(len(session.runs) for session in self.sessions)

    def list_response(self) -> dict[str, Any]:
        # Plugins are loaded once per process, so the answer never changes; build it once.
        if self._list_response is None:
            response = ListAgentRunnersResponse(runners=self.registry.manifests, plugins=self.registry.reports)
            self._list_response = response.model_dump(mode="json")
        return self._list_response

    async def start(self) -> None:
        """Nothing to start: the plugins were loaded when the service was built."""

    async def aclose(self) -> None:
        """Nothing to stop beyond the host connections, which the command line closes."""

    async def serve(self, transport: Transport, *, name: str = "host") -> None:
        """Serve one host connection until it closes (the WebSocket server's `on_transport`)."""
        session = HostSession(self, transport, name=name)
        self.sessions.add(session)
        try:
            await session.connection.start()
            await session.connection.wait_closed()
        finally:
            self.sessions.discard(session)
            await session.cancel_all()

    def find_run(self, run_id: str, preferred: HostSession) -> _ActiveRun | None:
        run = preferred.runs.get(run_id)
        if run is not None:
            return run
        for session in self.sessions:
            run = session.runs.get(run_id)
            if run is not None:
                return run
        return None


class HostSession:
    """One host connection: the handlers it serves and the runs it started."""

    def __init__(self, service: RuntimeService, transport: Transport, *, name: str = "host") -> None:
        self.service = service
        self.runs: dict[str, _ActiveRun] = {}
        self.connection = Connection(
            transport,
            handlers={
                Action.LIST_AGENT_RUNNERS.value: self.handle_list_agent_runners,
                Action.RUN_AGENT.value: self.handle_run_agent,
                Action.CANCEL_RUN.value: self.handle_cancel_run,
                Action.RUN_INPUT.value: self.handle_run_input,
                Action.PING.value: self.handle_ping,
            },
            name=name,
        )

    async def cancel_all(self) -> None:
        tasks = [run.task for run in self.runs.values() if run.task is not None and not run.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded: a runner that ignores cancellation must not keep the connection from closing.
            _, stuck = await asyncio.wait(tasks, timeout=self.service.cancel_grace)
            if stuck:
                logger.warning("%d runner task(s) ignored cancellation at connection close", len(stuck))

    # -- handlers ----------------------------------------------------------------------------------

    async def handle_list_agent_runners(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        return self.service.list_response()

    async def handle_ping(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        return PingResult(
            version=RUNTIME_VERSION,
            uptime_s=round(time.monotonic() - self.service.started_at, 3),
            runs_active=self.service.runs_active,
        ).model_dump()

    async def handle_cancel_run(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        run_id = data.get("run_id")
        run = self.service.find_run(run_id, self) if isinstance(run_id, str) else None
        if run is None or run.task is None or run.task.done() or run.cancel_requested:
            return {"cancelled": False}
        reason = data.get("reason")
        run.cancel_requested = True
        run.cancel_reason = reason if isinstance(reason, str) else None
        run.task.cancel()
        failure = _cancelled_failure(run)
        run.watchdogs.append(asyncio.get_running_loop().call_later(self.service.cancel_grace, run.abandon, failure))
        logger.info("run %s cancelled by the host", run_id)
        return {"cancelled": True}

    async def handle_run_input(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        """Hand more input to a running run; answered once its runner takes it, or when it never will."""
        try:
            item = RunInput.model_validate(data)
        except ValidationError as exc:
            raise AgentAPIException.invalid_argument(
                "the run_input request is invalid", errors=_validation_errors(exc)
            ) from None
        run = self.service.find_run(item.run_id, self)
        if run is None or run.task is None:
            return RunInputResult(accepted=False, reason="not_active").model_dump()
        if not run.steering:
            return RunInputResult(accepted=False, reason="not_supported").model_dump()
        if run.finished or run.cancel_requested or run.inbox.closed:
            return RunInputResult(accepted=False, reason="ended").model_dump()
        taken = await run.inbox.offer(item)
        return RunInputResult(accepted=taken, reason="taken" if taken else "ended").model_dump()

    async def handle_run_agent(self, data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        request, refusal = run_request_parse(data)
        if request is None:
            yield refusal
            return
        ctx = request.context
        loaded = self.service.registry.runners.get(request.runner_id)
        if loaded is None:
            yield _failure(
                ctx.run_id,
                RunFailureCode.RUNNER_NOT_FOUND,
                f"no runner {request.runner_id} in this runtime",
                details={"runner_id": request.runner_id},
            )
            return
        if ctx.run_id in self.runs:
            yield _failure(
                ctx.run_id,
                RunFailureCode.CONTEXT_INVALID,
                f"run {ctx.run_id} is already active",
                details={"run_id": ctx.run_id},
            )
            return

        run = _ActiveRun(ctx.run_id, request.runner_id, steering=loaded.manifest.capabilities.steering)
        self.runs[ctx.run_id] = run
        run.task = asyncio.create_task(self._supervise(run, loaded, ctx, request.run_token), name=f"run {ctx.run_id}")
        if ctx.runtime.deadline_at is not None:
            loop = asyncio.get_running_loop()
            hard_stop = loop.time() + (ctx.runtime.deadline_at - time.time()) + self.service.cancel_grace
            failure = _timeout_failure(ctx.run_id, ctx.runtime.deadline_at)
            run.watchdogs.append(loop.call_at(hard_stop, run.abandon, failure))
        outbox = run.outbox
        try:
            while (item := await outbox.get()) is not None:
                yield item
        finally:
            if not run.task.done():
                # The host stopped listening (connection closed or stream abandoned).
                run.task.cancel()
            run.finish()
            if self.runs.get(ctx.run_id) is run:
                del self.runs[ctx.run_id]

    # -- run supervision ---------------------------------------------------------------------------

    async def _supervise(
        self,
        run: _ActiveRun,
        loaded: LoadedRunner,
        ctx: AgentRunContext,
        run_token: str | None,
    ) -> None:
        """Drive the runner, emitting stamped results; exactly one terminal result ends the outbox."""
        channel = PluginChannel(self.connection, loaded.plugin_identity, run_token)
        bind_run_channel(ctx.run_id, channel, run.inbox)
        try:
            terminal = await self._drive(run, loaded, ctx)
            if terminal is not None:
                run.emit(terminal)
        finally:
            unbind_run_channel(ctx.run_id, channel)
            run.finish()

    async def _drive(self, run: _ActiveRun, loaded: LoadedRunner, ctx: AgentRunContext) -> dict[str, Any] | None:
        """Run the runner to its end; return the terminal result still to emit (None if it emitted one)."""
        run_id = ctx.run_id
        deadline_at = ctx.runtime.deadline_at
        remaining = None if deadline_at is None else deadline_at - time.time()
        if remaining is not None and remaining <= 0:
            return _timeout_failure(run_id, deadline_at)
        timeout_cm = asyncio.timeout(remaining)
        try:
            async with timeout_cm:
                results = _as_async_iterator(loaded.runner.run(ctx))
                try:
                    async for item in results:
                        result = _checked_result(item, run_id)
                        if run.cancel_requested or run.finished:
                            break  # a runner that swallowed the cancellation gets no further say
                        run.emit(result)
                        if result["type"] in _TERMINAL:
                            return None
                finally:
                    aclose = getattr(results, "aclose", None)
                    if aclose is not None:
                        await aclose()
        except _InvalidResultError as exc:
            logger.warning("run %s: runner %s yielded an invalid result: %s", run_id, run.runner_id, exc)
            return _failure(run_id, RunFailureCode.RUNNER_INVALID_RESULT, str(exc), details=exc.details)
        except TimeoutError:
            if timeout_cm.expired():
                logger.info("run %s: deadline reached, runner cancelled", run_id)
                return _timeout_failure(run_id, deadline_at)
            return self._exception_failure(run, TimeoutError("runner raised TimeoutError"))
        except asyncio.CancelledError:
            if not run.cancel_requested:
                raise
            # Swallowed on purpose: the run ends with the cancelled result instead of a dead stream.
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
        except Exception as exc:
            return self._exception_failure(run, exc)
        if run.cancel_requested:
            return _cancelled_failure(run)
        return _stamp(AgentRunResult.run_completed(run_id).model_dump(mode="json", exclude_none=True), run_id)

    def _exception_failure(self, run: _ActiveRun, exc: BaseException) -> dict[str, Any]:
        if isinstance(exc, MemoryError) and self.service.exit_on_memory_error:
            logger.critical("run %s: runner %s ran out of memory; the plugin process exits", run.run_id, run.runner_id)
            logging.shutdown()
            os._exit(EXIT_OUT_OF_MEMORY)
        logger.error("run %s: runner %s raised", run.run_id, run.runner_id, exc_info=exc)
        return _failure(
            run.run_id,
            RunFailureCode.RUNNER_EXCEPTION,
            f"{type(exc).__name__}: {exc}",
            details={"type": type(exc).__name__},
        )


# --- results ----------------------------------------------------------------------------------------


def _as_async_iterator(produced: Any) -> AsyncIterator[Any]:
    if hasattr(produced, "__aiter__"):
        return produced.__aiter__()  # type: ignore[no-any-return]
    raise _InvalidResultError(
        "run() must be an async generator (or return an async iterator)",
        {"returned": type(produced).__name__},
    )


def _checked_result(item: Any, run_id: str) -> dict[str, Any]:
    """Validate one yielded item strictly and return it as a wire dict stamped with `run_id`."""
    if isinstance(item, dict):
        # Dicts may leave run_id out (or carry a stale one); the runtime owns run_id and sequence.
        item = {**item, "run_id": run_id}
    try:
        result = AgentRunResult.coerce(item)
    except ValidationError as exc:
        result_type = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
        raise _InvalidResultError(
            f"invalid {result_type or 'result'}", {"type": result_type, "errors": _validation_errors(exc)}
        ) from None
    except TypeError as exc:
        raise _InvalidResultError(str(exc), {"yielded": type(item).__name__}) from None
    wire: dict[str, Any] = {"run_id": run_id, "type": result.type, "data": result.data}
    if result.timestamp is not None:
        wire["timestamp"] = result.timestamp
    try:
        size = len(_encode_json(wire))
    except (TypeError, ValueError) as exc:
        raise _InvalidResultError(f"{result.type} is not JSON-serialisable: {exc}", {"type": result.type}) from None
    if size > limits.RESULT_EVENT_MAX_BYTES:
        raise _InvalidResultError(
            f"{result.type} is {size} bytes; the limit is {limits.RESULT_EVENT_MAX_BYTES}",
            {"type": result.type, "size": size, "max_bytes": limits.RESULT_EVENT_MAX_BYTES},
        )
    return _stamp(wire, run_id)


def _stamp(wire: dict[str, Any], run_id: str) -> dict[str, Any]:
    wire["run_id"] = run_id
    wire.setdefault("timestamp", int(time.time() * 1000))
    return wire


def _failure(
    run_id: str,
    code: RunFailureCode,
    message: str,
    *,
    retryable: bool = False,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    result = AgentRunResult.run_failed(run_id, code.value, message, retryable=retryable, details=details)
    return _stamp(result.model_dump(mode="json", exclude_none=True), run_id)


def _cancelled_failure(run: _ActiveRun) -> dict[str, Any]:
    details = {"reason": run.cancel_reason} if run.cancel_reason else {}
    return _failure(run.run_id, RunFailureCode.CANCELLED, "the run was cancelled", details=details)


def _timeout_failure(run_id: str, deadline_at: float | None) -> dict[str, Any]:
    return _failure(
        run_id,
        RunFailureCode.RUNNER_TIMEOUT,
        "the run reached its deadline",
        retryable=True,
        details={"deadline_at": deadline_at},
    )


def run_request_parse(data: dict[str, Any]) -> tuple[AgentRunRequest | None, dict[str, Any]]:
    """A `run_agent` request read from the wire: the request, or None and the `run.failed` result that
    answers an invalid one (the plugin runtime and the isolating supervisor refuse alike)."""
    try:
        return AgentRunRequest.model_validate(data), {}
    except ValidationError as exc:
        refusal = _failure(
            _run_id_hint(data),
            RunFailureCode.CONTEXT_INVALID,
            "the run request is invalid",
            details={"errors": _validation_errors(exc)},
        )
        return None, refusal


def _run_id_hint(data: dict[str, Any]) -> str:
    context = data.get("context")
    run_id = context.get("run_id") if isinstance(context, dict) else None
    return run_id if isinstance(run_id, str) and run_id else "unknown"


def _validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    return [
        {"loc": [str(part) for part in error["loc"]], "msg": error["msg"], "type": error["type"]}
        for error in errors[:_MAX_REPORTED_ERRORS]
    ]
