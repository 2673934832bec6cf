"""Plugin isolation: one runtime process per plugin behind the one endpoint the host talks to.

What belongs here: `PluginSupervisor` (started by `python -m langbot_sdk.runtime --isolation plugin`),
which imports no plugin code itself. It starts one child runtime per plugin directory (`--stdio --plugin
DIR`, the same wire framing over pipes) under a memory limit (RLIMIT_AS), answers `list_agent_runners`
with the union of the children's answers, routes `run_agent`, `cancel_run` and `run_input` to the child that
owns the runner, and carries each run's proxy calls back to the host connection that started the run. A child that
dies (crash, `os._exit`, out of memory) fails only its own runs in flight, with a retryable
`runtime_error`, and is restarted with backoff; the other plugins' runs go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from langbot_sdk.protocol import (
    RUNTIME_TO_HOST_ACTIONS,
    STREAMING_ACTIONS,
    Action,
    AgentAPIException,
    AgentRunResult,
    ErrorCode,
    PingResult,
    ResultType,
    RunFailureCode,
)
from langbot_sdk.runtime.loader import declared_report, plugin_paths
from langbot_sdk.runtime.service import (
    DEFAULT_CANCEL_GRACE,
    EXIT_OUT_OF_MEMORY,
    RUNTIME_VERSION,
    _failure,
    _stamp,
    run_request_parse,
)
from langbot_sdk.wire import CallInfo, Connection, Handler, StdioTransport, Transport, WireError
from langbot_sdk.wire.framing import MAX_WIRE_MESSAGE_BYTES

__all__ = [
    "DEFAULT_ISOLATION",
    "DEFAULT_PLUGIN_MEMORY_MB",
    "ISOLATION_ENV",
    "ISOLATION_MODES",
    "PLUGIN_MEMORY_ENV",
    "PluginSupervisor",
    "plugin_memory_mb",
]

logger = logging.getLogger("langbot_sdk.runtime.supervisor")

ISOLATION_ENV = "LANGBOT_RUNTIME_ISOLATION"
ISOLATION_MODES = ("plugin", "none")
DEFAULT_ISOLATION = "none"
PLUGIN_MEMORY_ENV = "LANGBOT_PLUGIN_MEMORY_MB"
DEFAULT_PLUGIN_MEMORY_MB = 1024
RESTART_BACKOFF_BASE = 0.5
RESTART_BACKOFF_MAX = 30.0
# A child that stayed up this long counts as healthy again: its next crash restarts it after the base delay.
STABLE_AFTER = 30.0
# How long a run for a plugin whose process is restarting waits for it before failing (retryable).
READY_WAIT = 10.0
# The first answer of a fresh child (it imports its plugin meanwhile).
LIST_TIMEOUT = 60.0
_TERMINAL = frozenset({ResultType.RUN_COMPLETED.value, ResultType.RUN_FAILED.value})


def plugin_memory_mb(environ: dict[str, str] | None = None) -> int:
    """The per-plugin memory limit in MiB from the environment; 0 means no limit."""
    raw = (environ if environ is not None else os.environ).get(PLUGIN_MEMORY_ENV, "").strip()
    if not raw:
        return DEFAULT_PLUGIN_MEMORY_MB
    try:
        return max(0, int(raw))
    except ValueError:
        logger.warning("%s=%r is not a whole number of MiB; using %d", PLUGIN_MEMORY_ENV, raw, DEFAULT_PLUGIN_MEMORY_MB)
        return DEFAULT_PLUGIN_MEMORY_MB


def _memory_limiter(memory_mb: int) -> Callable[[], None] | None:
    if memory_mb <= 0:
        return None
    limit = memory_mb * 1024 * 1024

    def limit_memory() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return limit_memory


class _RoutedRun:
    """A run in flight in one child, and the host connection that started it."""

    __slots__ = ("child", "run_id", "session")

    def __init__(self, run_id: str, child: _PluginProcess, session: _SupervisorSession) -> None:
        self.run_id = run_id
        self.child = child
        self.session = session


class _PluginProcess:
    """One plugin's runtime process: started, watched and restarted with backoff."""

    def __init__(self, supervisor: PluginSupervisor, path: Path) -> None:
        self.supervisor = supervisor
        self.path = path
        self.connection: Connection | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.listing: dict[str, Any] | None = None
        self.failure: str | None = None
        self.ready = asyncio.Event()
        self.first_attempt = asyncio.Event()
        self.restarts = 0
        self._crashes_in_a_row = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep_running(), name=f"plugin process {self.path.name}")

    async def _keep_running(self) -> None:
        while not self.supervisor.stopping:
            started = time.monotonic()
            try:
                status = await self._run_once()
            except Exception:
                logger.exception("plugin process %s: supervising it failed", self.path)
                status = None
            if self.supervisor.stopping:
                return
            if time.monotonic() - started >= STABLE_AFTER:
                self._crashes_in_a_row = 0
            delay = min(RESTART_BACKOFF_MAX, RESTART_BACKOFF_BASE * 2**self._crashes_in_a_row)
            self._crashes_in_a_row += 1
            reason = "ran out of memory" if status == EXIT_OUT_OF_MEMORY else f"exited with status {status}"
            logger.error("plugin process %s %s; restarting in %.1fs", self.path, reason, delay)
            self.restarts += 1
            await asyncio.sleep(delay)

    async def _run_once(self) -> int | None:
        supervisor = self.supervisor
        argv = [
            sys.executable, "-m", "langbot_sdk.runtime", "--stdio", "--isolation", "none",
            "--plugin", str(self.path), "--exit-on-memory-error",
            "--cancel-grace", repr(supervisor.cancel_grace), "--log-level", supervisor.log_level,
        ]  # fmt: skip
        env = dict(os.environ)
        # A plugin has no use for the token hosts present to a listening runtime.
        env.pop("LANGBOT_RUNTIME_TOKEN", None)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=None,
                env=env,
                limit=MAX_WIRE_MESSAGE_BYTES,
                preexec_fn=_memory_limiter(supervisor.memory_mb),
                # Its own session: a terminal's Ctrl-C reaches the supervisor, which stops the children.
                start_new_session=True,
            )
        except OSError as exc:
            self.failure = f"cannot start the plugin process: {exc}"
            self.first_attempt.set()
            return None
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        transport = StdioTransport(process.stdout, process.stdin, max_frame_bytes=MAX_WIRE_MESSAGE_BYTES)
        connection = Connection(transport, handlers=self._proxy_handlers(), name=f"plugin {self.path.name}")
        self.connection = connection
        await connection.start()
        try:
            try:
                listing = await connection.call(Action.LIST_AGENT_RUNNERS.value, {}, timeout=LIST_TIMEOUT)
            except WireError as exc:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), timeout=1.0)
                if process.returncode is None:
                    # Hung while loading its plugin: killed, so that it is started again.
                    self.failure = f"the plugin process did not answer: {exc.error.message}"
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                else:
                    self.failure = f"the plugin process exited with status {process.returncode} while loading"
            else:
                self.listing = listing
                self.failure = None
                self.ready.set()
            self.first_attempt.set()
            status = await process.wait()
            if self.failure is None:
                self.failure = f"the plugin process exited with status {status}"
            return status
        finally:
            self.ready.clear()
            self.first_attempt.set()
            await connection.close()
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()

    async def usable(self, wait: float) -> Connection | None:
        """The connection to the process once it is up and answering, waiting up to `wait` seconds while
        it restarts; None if it is not back by then."""
        deadline = time.monotonic() + wait
        while True:
            connection = self.connection
            # A closed connection with `ready` still set: the process just died and is not reaped yet.
            if self.ready.is_set() and connection is not None and not connection.closed:
                return connection
            if time.monotonic() >= deadline or self.supervisor.stopping:
                return None
            await asyncio.sleep(0.05)

    async def stop(self, grace: float) -> None:
        connection, process = self.connection, self.process
        if connection is not None:
            await connection.close()  # the child's stdin closes: its cue to stop
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(process.wait(), timeout=grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _proxy_handlers(self) -> dict[str, Handler]:
        handlers: dict[str, Handler] = {}
        for action in RUNTIME_TO_HOST_ACTIONS:
            if action in STREAMING_ACTIONS:
                handlers[action.value] = self._forward_stream(action.value)
            else:
                handlers[action.value] = self._forward_call(action.value)
        return handlers

    def _host_of(self, data: dict[str, Any]) -> Connection:
        """The host connection that started the run a proxy call names; only this child's runs count."""
        run = self.supervisor.runs.get(str(data.get("run_id")))
        if run is None or run.child is not self:
            raise AgentAPIException.of(ErrorCode.NOT_FOUND, f"run {data.get('run_id')} is not active in this plugin")
        return run.session.connection

    def _forward_call(self, action: str) -> Handler:
        async def forward(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
            return await self._host_of(data).call(action, data)

        return forward

    def _forward_stream(self, action: str) -> Handler:
        async def forward(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
            host = self._host_of(data)
            async with host.stream(action, data) as items:
                async for item in items:
                    yield item

        return forward


class _SupervisorSession:
    """One host connection to the supervisor: its handlers and the runs it started."""

    def __init__(self, supervisor: PluginSupervisor, transport: Transport, *, name: str) -> None:
        self.supervisor = supervisor
        self.runs: set[str] = set()
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

    async def handle_list_agent_runners(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        listing, _ = await self.supervisor.merged()
        return listing

    async def handle_ping(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        return PingResult(
            version=RUNTIME_VERSION,
            uptime_s=round(time.monotonic() - self.supervisor.started_at, 3),
            runs_active=len(self.supervisor.runs),
        ).model_dump()

    async def handle_cancel_run(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        run = self.supervisor.runs.get(str(data.get("run_id")))
        connection = run.child.connection if run is not None else None
        if connection is None:
            return {"cancelled": False}
        try:
            return await connection.call(Action.CANCEL_RUN.value, data)
        except WireError:
            return {"cancelled": False}

    async def handle_run_input(self, data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        # Routed like cancel_run; the child answers once its runner has taken the input.
        run = self.supervisor.runs.get(str(data.get("run_id")))
        connection = run.child.connection if run is not None else None
        if connection is None:
            return {"accepted": False, "reason": "not_active"}
        try:
            return await connection.call(Action.RUN_INPUT.value, data)
        except WireError:
            return {"accepted": False, "reason": "ended"}

    async def handle_run_agent(self, data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        request, refusal = run_request_parse(data)
        if request is None:
            yield refusal
            return
        run_id = request.context.run_id
        _, owners = await self.supervisor.merged()
        child = owners.get(request.runner_id)
        if child is None:
            yield _failure(
                run_id,
                RunFailureCode.RUNNER_NOT_FOUND,
                f"no runner {request.runner_id} in this runtime",
                details={"runner_id": request.runner_id},
            )
            return
        if run_id in self.supervisor.runs:
            yield _failure(
                run_id, RunFailureCode.CONTEXT_INVALID, f"run {run_id} is already active", details={"run_id": run_id}
            )
            return
        connection = await child.usable(self.supervisor.ready_wait)
        if connection is None:
            yield _plugin_down_failure(run_id, child, sequence=1)
            return
        self.supervisor.runs[run_id] = _RoutedRun(run_id, child, self)
        self.runs.add(run_id)
        sequence = 0
        try:
            async with connection.stream(Action.RUN_AGENT.value, data) as results:
                async for result in results:
                    sequence = result.get("sequence", sequence + 1)
                    yield result
                    if result.get("type") in _TERMINAL:
                        return
        except WireError:
            pass  # the plugin's process went away under the run
        finally:
            self.runs.discard(run_id)
            if self.supervisor.runs.get(run_id, None) is not None:
                del self.supervisor.runs[run_id]
        yield _plugin_down_failure(run_id, child, sequence=sequence + 1)

    async def cancel_all(self) -> None:
        """The host went away: its runs stop in their plugins, as they do in a runtime without isolation."""
        for run_id in list(self.runs):
            run = self.supervisor.runs.get(run_id)
            connection = run.child.connection if run is not None else None
            if connection is not None:
                with contextlib.suppress(WireError):
                    await connection.call(Action.CANCEL_RUN.value, {"run_id": run_id, "reason": "host_gone"})


def _plugin_down_failure(run_id: str, child: _PluginProcess, *, sequence: int) -> dict[str, Any]:
    # runtime_error, retryable: the runtime (not the runner) lost the run, and a retry reaches the
    # restarted process.
    result = AgentRunResult.run_failed(
        run_id,
        ErrorCode.RUNTIME_ERROR.value,
        "the plugin's process stopped; it is being restarted",
        retryable=True,
        details={"plugin_path": str(child.path), "reason": child.failure},
    )
    wire = _stamp(result.model_dump(mode="json", exclude_none=True), run_id)
    wire["sequence"] = sequence
    return wire


class PluginSupervisor:
    """The runtime endpoint in `--isolation plugin` mode (same serve interface as RuntimeService)."""

    def __init__(
        self,
        plugin_dirs: Sequence[str | Path],
        *,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        memory_mb: int = DEFAULT_PLUGIN_MEMORY_MB,
        log_level: str = "INFO",
        ready_wait: float = READY_WAIT,
    ) -> None:
        self.plugin_dirs = list(plugin_dirs)
        self.cancel_grace = cancel_grace
        self.memory_mb = memory_mb
        self.log_level = log_level
        self.ready_wait = ready_wait
        self.started_at = time.monotonic()
        self.stopping = False
        self.children: list[_PluginProcess] = []
        self.runs: dict[str, _RoutedRun] = {}
        self.sessions: set[_SupervisorSession] = set()

    async def start(self) -> None:
        self.children = [_PluginProcess(self, path) for path in plugin_paths(self.plugin_dirs)]
        for child in self.children:
            child.start()
        logger.info(
            "langbot runtime %s (isolation: plugin): %d plugin process(es), memory limit %s",
            RUNTIME_VERSION,
            len(self.children),
            f"{self.memory_mb} MiB each" if self.memory_mb else "none",
        )

    async def aclose(self) -> None:
        self.stopping = True
        await asyncio.gather(*(child.stop(self.cancel_grace + 1) for child in self.children))

    async def serve(self, transport: Transport, *, name: str = "host") -> None:
        session = _SupervisorSession(self, transport, name=name)
        self.sessions.add(session)
        try:
            await session.connection.start()
            await session.connection.wait_closed()
        finally:
            self.sessions.discard(session)
            await session.cancel_all()

    async def merged(self) -> tuple[dict[str, Any], dict[str, _PluginProcess]]:
        """The union of the children's listings (each child's last answer), and the owner of each runner.

        A plugin whose process never answered is reported as an error; a runner id already provided by an
        earlier plugin makes the later plugin an error, as it does without isolation."""
        await asyncio.gather(*(child.first_attempt.wait() for child in self.children))
        runners: list[dict[str, Any]] = []
        reports: list[dict[str, Any]] = []
        owners: dict[str, _PluginProcess] = {}
        for child in self.children:
            listing = child.listing
            if listing is None:
                unanswered = declared_report(child.path, child.failure or "the plugin process is not running")
                reports.append(unanswered.model_dump(mode="json"))
                continue
            child_runners = [r for r in listing.get("runners", []) if isinstance(r, dict)]
            taken = next((r["id"] for r in child_runners if r.get("id") in owners), None)
            child_reports = [dict(r) for r in listing.get("plugins", []) if isinstance(r, dict)]
            if taken is not None:
                error = f"duplicate runner id {taken} (already provided by {owners[taken].path})"
                for report in child_reports:
                    report.update(status="error", error=error)
                reports.extend(child_reports)
                continue
            for runner in child_runners:
                owners[runner["id"]] = child
            runners.extend(child_runners)
            reports.extend(child_reports)
        return {"runners": runners, "plugins": reports}, owners
