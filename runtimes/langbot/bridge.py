"""The host as LangBot's plugin runtime (`lbp rt`) expects its host: the control handshake, the runner
catalog, runs and their cancellation, and the runtime's calls back to the host.

Handshake (what LangBot does on connecting): `set_runtime_config` with a fixed runtime identity and worker
policy (profile `oss_dev`, the runtime's own `data/plugins` tree); every other call carries one fixed
installation binding, which fences the runtime to this host. The runtime then launches its plugins and asks
`get_plugin_settings` for each; the answer names the installation by the plugin's `author/name`, so every
later call of that plugin arrives with it as the trusted `installation_uuid`.

Runs: `run_runner` streams LangBot `RunnerResult`s, translated into ours; `cancel_run` cancels that call
(`__cancel_action`), which the runtime passes on to the plugin, and the run ends `cancelled`.

Host calls: a runner's run-scoped call (state, history, events, models, tools, knowledge, storage) is
translated into our proxy action and served by the worker's own proxy handlers, stamped as our plugin
runtime stamps them (`langbot_sdk.runtime.service.PluginChannel`): the run token of the run the call names
— only while that run is in flight through this bridge — and, as caller, the plugin the runtime says made
the call. The handlers then refuse a call for another plugin's run, a stale run, or a resource or scope
the binding does not grant, exactly as for our runners, and audit every call. A call with no equivalent
here answers LangBot's error shape (`data.error` an AgentAPIError) naming the action.

LangBot's runtime serves one control connection at a time: a newer one (another process refreshing the
catalog) supersedes the older, which reconnects on its next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from django.conf import settings

import foundation.version
import runtimes.langbot.translate as translate
from langbot_sdk.protocol import Action, AgentAPIException, ListAgentRunnersResponse, RunnerId
from langbot_sdk.wire import CallInfo, Handler
from runtimes.langbot.wire import LangBotCallError, LangBotConnection, LangBotHandler

logger = logging.getLogger(__name__)

INSTANCE_UUID = "langbot-host"
RUNTIME_ID = "langbot-host-bridge"
WORKER_POLICY = {
    "max_cpus": 1.0,
    "max_memory_mb": 1024,
    "max_pids": 256,
    "max_open_files": 1024,
    "max_file_size_mb": 64,
}
# The one installation binding every tenant-scoped control call carries (`oss_dev` profile pins it).
CONTROL_BINDING = {
    "instance_uuid": INSTANCE_UUID,
    "workspace_uuid": "langbot-host",
    "placement_generation": 1,
    "installation_uuid": "langbot-host-control",
    "runtime_revision": 1,
    "artifact_digest": hashlib.sha256(b"langbot-host-control").hexdigest(),
}
# What `get_langbot_version` answers plugins: the same string as the run context's `runtime.langbot_version`.
HOST_VERSION = foundation.version.HOST_VERSION
EMPTY_LISTING_GRACE = 5.0
LISTING_STABLE_SECONDS = 2.0
# How long after a host connects the runtime may still be starting its plugins (it starts them all at once,
# each a Python process of its own: 15 s on a loaded two-core machine); before that, a plugin not listed yet
# is not a plugin gone.
MOUNT_GRACE = 30.0
# A plugin that started (asked for its settings) and is still not registered this long after has failed.
PLUGIN_LOAD_GRACE = 10.0
# The holder lists the catalog this often; reconnects after 1, 2, 4 ... 30 s.
HOLD_LIST_EVERY = 5.0
HOLD_RETRY_MIN = 1.0
HOLD_RETRY_MAX = 30.0
# Runs end `cancelled` once the runtime was asked to stop; its own stream has no terminal result then.
CANCELLED_CODE = "cancelled"
CANCELLED_MESSAGE = "the run was cancelled; the LangBot runtime was told to stop it"


def _unavailable(message: str) -> AgentAPIException:
    return AgentAPIException.runtime_error(message, retryable=True)


@dataclass
class LangBotCatalog:
    """The runtime's runners as our report; `settled`: its listing stayed the same for a while after its
    plugins' first start, so a runner not in it is gone (not still starting)."""

    report: ListAgentRunnersResponse
    settled: bool


@dataclass
class _Run:
    run_id: str
    run_token: str | None
    plugin_identity: str
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_reason: str = ""


class LangBotRuntime:
    """This process's connection to LangBot's runtime, opened on first use and after it dropped."""

    def __init__(self, url: str, *, token: str = "", handlers: Mapping[str, Handler] | None = None) -> None:
        self.url = url
        self.token = token
        self.proxy_handlers = dict(handlers or {})
        self.runs: dict[str, _Run] = {}
        self._connection: LangBotConnection | None = None
        self._connected_at: float | None = None
        self._lock = asyncio.Lock()
        # Plugins that asked for their settings on this process's connections (they started), by identity,
        # with when they first asked: one that never registers failed to load.
        self.started: dict[str, float] = {}

    async def connection(self) -> LangBotConnection:
        async with self._lock:
            if self._connection is not None and not self._connection.closed.is_set():
                return self._connection
            try:
                connection = await LangBotConnection.open(self.url, self._handlers(), token=self.token)
                await connection.call(
                    "set_runtime_config",
                    {
                        "runtime_identity": {"instance_uuid": INSTANCE_UUID, "runtime_id": RUNTIME_ID},
                        "worker_policy": WORKER_POLICY,
                        "runtime_profile": "oss_dev",
                    },
                    timeout=10.0,
                )
            except (OSError, TimeoutError, LangBotCallError) as exc:
                raise _unavailable(f"LangBot plugin runtime at {self.url} unavailable: {exc}") from exc
            except Exception as exc:  # websockets' handshake errors (refused token, not a WebSocket, ...)
                raise _unavailable(f"LangBot plugin runtime at {self.url} refused the connection: {exc}") from exc
            self._connection = connection
            self._connected_at = time.monotonic()
            return connection

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.aclose()
            self._connection = None

    # -- catalog ---------------------------------------------------------------------------------------

    async def list_runners(self) -> list[dict[str, Any]]:
        connection = await self.connection()
        try:
            answer = await connection.call("list_runners", {}, context=CONTROL_BINDING, timeout=30.0)
        except (LangBotCallError, TimeoutError) as exc:
            raise _unavailable(f"LangBot plugin runtime could not list its runners: {exc}") from exc
        return [entry for entry in answer.get("runners") or [] if isinstance(entry, dict)]

    async def list_plugins(self) -> list[dict[str, Any]]:
        connection = await self.connection()
        try:
            answer = await connection.call("list_plugins", {}, context=CONTROL_BINDING, timeout=30.0)
        except (LangBotCallError, TimeoutError) as exc:
            raise _unavailable(f"LangBot plugin runtime could not list its plugins: {exc}") from exc
        return [plugin for plugin in answer.get("plugins") or [] if isinstance(plugin, dict)]

    async def report(self, *, settle: float = 0.0) -> ListAgentRunnersResponse:
        """Our runner report of LangBot's agent runners (`catalog`, without whether it settled)."""
        return (await self.catalog(settle=settle)).report

    async def catalog(self, *, settle: float = 0.0) -> LangBotCatalog:
        """LangBot's agent runners as our report, with the plugins that did not load. `settle`: how long to
        wait for the runtime's plugins to come up (it launches them only once a host connected, all at once,
        and lists a plugin only once it registered): the listing is asked again until it holds runners and
        stayed the same for `LISTING_STABLE_SECONDS`, or the time is up."""
        entries = await self.list_runners()
        # A runtime that lists nothing may be launching its plugins right now: even a person waiting on a
        # refresh gets a few seconds for them.
        now = time.monotonic()
        deadline = now + max(settle, 0.0 if entries else EMPTY_LISTING_GRACE)
        unchanged_since = now
        while time.monotonic() < deadline:
            if entries and time.monotonic() - unchanged_since >= LISTING_STABLE_SECONDS:
                break
            await asyncio.sleep(0.5)
            again = await self.list_runners()
            if again != entries:
                entries, unchanged_since = again, time.monotonic()
        plugins = await self.list_plugins()
        report = self._report(entries, plugins)
        stable = time.monotonic() - unchanged_since >= LISTING_STABLE_SECONDS
        return LangBotCatalog(report=report, settled=stable and self._mounted(entries, plugins))

    def _mounted(self, entries: list[dict[str, Any]], plugins: list[dict[str, Any]]) -> bool:
        """Whether the runtime's plugins are past starting: it launches them once a host connected (an empty
        listing early on is not an empty runtime) and lists a plugin once it registered (one that started a
        moment ago may still come)."""
        if self._connected_at is None:
            return False
        if not entries and time.monotonic() - self._connected_at < MOUNT_GRACE:
            return False
        registered = {translate.plugin_identity(plugin) for plugin in plugins}
        now = time.monotonic()
        return not any(
            identity not in registered and now - first < PLUGIN_LOAD_GRACE for identity, first in self.started.items()
        )

    def _report(self, entries: list[dict[str, Any]], plugins: list[dict[str, Any]]) -> ListAgentRunnersResponse:
        runners = []
        warnings: dict[str, list[str]] = {}
        errors: list[str] = []
        for entry in entries:
            if "agent" not in ((entry.get("manifest") or {}).get("usages") or ["agent"]):
                continue  # event processors: nothing of ours runs them
            try:
                manifest, notes = translate.runner_manifest(entry)
            except (ValueError, TypeError) as exc:
                errors.append(f"{entry.get('plugin_author')}/{entry.get('plugin_name')}: {exc}")
                continue
            runners.append(manifest)
            warnings[manifest.id] = notes
        reports = translate.load_reports(entries, warnings)
        reports.extend(
            translate.PluginLoadReport(path=f"langbot:{error.split(':')[0]}", status="error", error=error)
            for error in errors
        )
        listed = {f"{report.author}/{report.name}" for report in reports if report.author}
        reports.extend(translate.unloaded_plugin_reports(plugins, listed))
        # A plugin that asked for its settings (it started) but never registered failed to import or to
        # initialize; the runtime restarts it with a growing delay and tells its host nothing more.
        registered = {translate.plugin_identity(plugin) for plugin in plugins}
        for identity, first_asked in sorted(self.started.items()):
            if identity in registered:
                self.started.pop(identity, None)
            elif time.monotonic() - first_asked >= PLUGIN_LOAD_GRACE:
                reports.append(
                    translate.PluginLoadReport(
                        path=f"langbot:{identity}",
                        author=identity.split("/")[0],
                        name=identity.split("/")[-1],
                        status="error",
                        error=f"LangBot plugin {identity} started but did not load: its code failed to import or "
                        "to initialize (the LangBot runtime's log has the traceback); the runtime keeps restarting it",
                    )
                )
        return ListAgentRunnersResponse(runners=runners, plugins=reports)

    # -- holding the control connection ---------------------------------------------------------------

    async def hold(self, publish: Callable[[LangBotCatalog], Awaitable[None]]) -> None:
        """Keep the control connection open for as long as this process runs, reconnecting when it drops
        (the runtime restarted, or another process's connection superseded it), and `publish` the catalog
        every `HOLD_LIST_EVERY` seconds. LangBot's runtime starts its plugins only while a host holds the
        connection, and a plugin that starts with none fails ("is LangBot connected?") and is restarted with
        a growing delay: the host must not leave it alone between runs."""
        delay = HOLD_RETRY_MIN
        while True:
            try:
                connection = await self.connection()
                delay = HOLD_RETRY_MIN
                while not connection.closed.is_set():
                    await publish(await self.catalog())
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(connection.closed.wait(), HOLD_LIST_EVERY)
            except AgentAPIException as exc:
                logger.info("LangBot plugin runtime: %s; trying again in %.0f s", exc.error.message, delay)
            except Exception:
                logger.warning("holding the LangBot runtime's connection failed", exc_info=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, HOLD_RETRY_MAX)

    # -- runs ------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def run_agent(self, request: dict[str, Any]) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        runner_id = RunnerId.parse(str(request["runner_id"]))
        context = dict(request["context"])
        run = _Run(
            run_id=str(context["run_id"]),
            run_token=request.get("run_token"),
            plugin_identity=f"{runner_id.author}/{runner_id.plugin}",
        )
        connection = await self.connection()
        self.runs[run.run_id] = run
        try:
            yield self._results(connection, run, runner_id, context)
        finally:
            self.runs.pop(run.run_id, None)

    async def _results(
        self, connection: LangBotConnection, run: _Run, runner_id: RunnerId, context: dict[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        deadline_at = (context.get("runtime") or {}).get("deadline_at")
        timeout = max(1.0, float(deadline_at) - time.time() + 5.0) if deadline_at else 600.0
        await self._mount_wait(run, runner_id, min(MOUNT_GRACE, timeout))
        stream = connection.stream(
            "run_runner",
            {
                "plugin_author": runner_id.author,
                "plugin_name": runner_id.plugin,
                "runner_name": runner_id.runner,
                "context": translate.run_context(context),
            },
            context=CONTROL_BINDING,
            timeout=timeout,
        )
        cancelled = asyncio.create_task(run.cancelled.wait())
        try:
            while True:
                following = asyncio.ensure_future(anext(stream))
                await asyncio.wait({following, cancelled}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():
                    # Cancelling the pending read leaves the stream early: it sends `__cancel_action`.
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                        await following
                    yield _failed(run.run_id, CANCELLED_CODE, CANCELLED_MESSAGE, reason=run.cancel_reason)
                    return
                try:
                    item = following.result()
                except StopAsyncIteration:
                    return
                except LangBotCallError as exc:
                    yield _failed(run.run_id, "runtime_error", f"LangBot plugin runtime: {exc}", retryable=True)
                    return
                except TimeoutError:
                    yield _failed(run.run_id, "runner.timeout", "the LangBot runner did not answer in time")
                    return
                for result in translate.results(item, run.run_id):
                    if result["type"] == "run.failed" and self._still_mounting(run, result["data"]["code"]):
                        result["data"]["retryable"] = True
                    yield result
                    if result["type"] in ("run.completed", "run.failed"):
                        return
        finally:
            cancelled.cancel()
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]  # an async generator

    async def _mount_wait(self, run: _Run, runner_id: RunnerId, limit: float) -> None:
        """Right after (re)connecting, the runtime is still starting its plugins and answers a run of one not
        registered yet `runner.plugin_not_found`: wait, up to `limit` seconds and no later than the mount grace,
        until it lists the runner (or the run is cancelled)."""
        if self._connected_at is None:
            return
        until = min(self._connected_at + MOUNT_GRACE, time.monotonic() + limit)
        while time.monotonic() < until and not run.cancelled.is_set():
            try:
                listed = {str((entry.get("manifest") or {}).get("id")) for entry in await self.list_runners()}
            except AgentAPIException:
                return  # the run's own call reports the connection
            if str(runner_id) in listed:
                return
            await asyncio.sleep(0.5)

    def _still_mounting(self, run: _Run, code: str) -> bool:
        """Whether a run the runtime refused for want of its plugin may succeed shortly: the plugin is starting
        (initializing, or started and not registered yet) or the runtime's plugins are still being started."""
        if code == "runner.plugin_not_initialized":
            return True
        if code != "runner.plugin_not_found":
            return False
        young = self._connected_at is not None and time.monotonic() - self._connected_at < MOUNT_GRACE
        return young or run.plugin_identity in self.started

    async def cancel_run(self, run_id: str, reason: str) -> None:
        run = self.runs.get(run_id)
        if run is None:
            raise AgentAPIException.not_found(f"run {run_id!r} is not in flight on the LangBot plugin runtime")
        run.cancel_reason = reason
        run.cancelled.set()

    # -- the runtime's calls ---------------------------------------------------------------------------

    def _handlers(self) -> dict[str, LangBotHandler]:
        handlers: dict[str, LangBotHandler] = {
            "get_plugin_settings": self._plugin_settings,
            "initialize_plugin_settings": self._plugin_settings,
            "get_langbot_version": self._version,
        }
        for action in (
            "state_get", "state_set", "state_delete", "state_list", "history_page", "history_search",
            "event_get", "event_page", "invoke_llm", "invoke_llm_stream", "count_tokens", "invoke_rerank",
            "get_tool_detail", "call_tool", "retrieve_knowledge_base", "set_binary_storage", "get_binary_storage",
            "delete_binary_storage", "get_binary_storage_keys",
        ):  # fmt: skip
            handlers[action] = self._host_call_handler(action)
        return handlers

    async def _plugin_settings(self, data: dict[str, Any], _context: dict[str, Any] | None) -> dict[str, Any]:
        identity = f"{data.get('plugin_author')}/{data.get('plugin_name')}"
        self.started.setdefault(identity, time.monotonic())
        return {
            "installation_uuid": identity,
            "enabled": True,
            "priority": 0,
            "plugin_config": {},
            "install_source": "local",
            "install_info": {},
        }

    async def _version(self, _data: dict[str, Any], _context: dict[str, Any] | None) -> dict[str, Any]:
        # Not a LangBot release number: this host is not LangBot, and a plugin comparing versions should see so.
        return {"version": HOST_VERSION}

    def _host_call_handler(self, action: str) -> LangBotHandler:
        async def handle(data: dict[str, Any], context: dict[str, Any] | None) -> Any:
            mapped = translate.host_call(action, data)
            if mapped is None:
                raise _refusal(
                    AgentAPIException.invalid_argument(
                        f"{action} outside a run has no equivalent on this host: runners reach host "
                        "resources through run-scoped calls only"
                    )
                )
            ours, request = mapped
            handler = self.proxy_handlers.get(ours.value)
            if handler is None:
                raise _refusal(AgentAPIException.unauthorized(f"{action}: no run is in flight on this connection"))
            run_id = str(data.get("run_id") or "")
            run = self.runs.get(run_id)
            # The runtime binds each plugin's calls to the installation it was given at registration, which
            # is the plugin's identity (`_plugin_settings`); what runner code put in the payload is not used.
            caller = str((context or {}).get("installation_uuid") or data.get("caller_plugin_identity") or "")
            stamped = {
                **request,
                "run_id": run_id,
                "run_token": run.run_token if run is not None else None,
                "caller_plugin_identity": caller,
            }
            try:
                # Our proxy handlers read nothing of the CallInfo of a call on our own wire.
                called = handler(stamped, cast(CallInfo, None))
                answer: Any = await called if inspect.isawaitable(called) else called
            except AgentAPIException as exc:
                raise _refusal(exc) from None
            if isinstance(answer, dict):
                return translate.host_answer(action, ours, answer)
            return _stream_answers(ours, answer)

        return handle


async def _stream_answers(ours: Action, items: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    try:
        async for item in items:
            yield translate.stream_answer(ours, item)
    except AgentAPIException as exc:
        raise _refusal(exc) from None


def _refusal(exc: AgentAPIException) -> LangBotCallError:
    """LangBot's error shape for one of our refusals: its SDK raises `AgentAPIException(data.error)`."""
    error = exc.error.model_dump(mode="json")
    return LangBotCallError(f"{error['code']}: {error['message']}", {"error": error})


def _failed(run_id: str, code: str, message: str, *, retryable: bool = False, reason: str = "") -> dict[str, Any]:
    data: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if reason:
        data["details"] = {"reason": reason}
    return {"run_id": run_id, "type": "run.failed", "data": data}


class LangBotRunnerHost:
    """`runtimes.hosts.RunnerHost` of LangBot's runtime, for one worker."""

    def __init__(self, runtime: LangBotRuntime) -> None:
        self.runtime = runtime

    def run_agent(
        self, request: dict[str, Any]
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]:
        return self.runtime.run_agent(request)

    async def cancel_run(self, run_id: str, reason: str, *, timeout: float) -> None:
        await self.runtime.cancel_run(run_id, reason)

    async def aclose(self) -> None:
        await self.runtime.aclose()


def langbot_runner_host(source_key: str, handlers: Mapping[str, Handler]) -> LangBotRunnerHost:
    """`runtimes.hosts.RunnerHostFactory` of the `langbot` source."""
    url = settings.LANGBOT_LANGBOT_RUNTIME_URL
    if not url:
        raise AgentAPIException.runtime_error(
            "a LangBot runner was asked to run but LANGBOT_LANGBOT_RUNTIME_URL is not set", retryable=False
        )
    return LangBotRunnerHost(LangBotRuntime(url, token=settings.LANGBOT_LANGBOT_RUNTIME_TOKEN, handlers=handlers))


def langbot_catalog(*, settle: float | None = None) -> LangBotCatalog:
    """LangBot's agent runners as our report, over a connection of its own (sync callers). Raises
    `AgentAPIException` (`runtime_error`) when the runtime cannot be reached."""
    runtime = LangBotRuntime(settings.LANGBOT_LANGBOT_RUNTIME_URL, token=settings.LANGBOT_LANGBOT_RUNTIME_TOKEN)
    wait = settings.LANGBOT_LANGBOT_RUNTIME_SETTLE if settle is None else settle

    async def ask() -> LangBotCatalog:
        try:
            return await runtime.catalog(settle=wait)
        finally:
            await runtime.aclose()

    return asyncio.run(ask())


def langbot_report(*, settle: float | None = None) -> ListAgentRunnersResponse:
    """`langbot_catalog`'s report."""
    return langbot_catalog(settle=settle).report
