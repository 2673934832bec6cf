"""`python -m langbot_sdk dev`: live development of a plugin against a running host.

What belongs here: the development session on the author's machine. It runs the plugin runtime as a child
process listening on 127.0.0.1 (only the author's plugin loaded), prints the child's output to the terminal,
dials the host's development endpoint (`/ws/v1/dev/runtime/`, so it works from behind NAT), reports the
runners, and relays the host's wire connections to the child. When a file of the plugin changes (watchfiles)
it restarts the child and reports the runners again; when the host goes away it dials again with backoff
(tenacity).

The envelope on the host WebSocket (one JSON object per text message, `type` first):
CLI -> host: `runners` {report}, `opened` {conn}, `open_failed` {conn, error}, `frame` {conn, data},
`close` {conn}; host -> CLI: `registered` {session, workspace, available, errors}, `open` {conn},
`frame` {conn, data}, `close` {conn}, `error` {code, message} (then the host closes the socket).
A `frame`'s data is one wire frame, the exact text the runtime or the host sent: it is never re-encoded.

Nothing here imports the host: the SDK is installed on machines that have no host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tenacity import AsyncRetrying, RetryCallState, retry_if_result, wait_exponential
from watchfiles import Change, awatch
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from langbot_sdk.protocol import Action
from langbot_sdk.wire import MAX_WIRE_MESSAGE_BYTES, Connection, WireError, connect_websocket

__all__ = [
    "DEV_PATH",
    "TOKEN_ENV",
    "DevSession",
    "DevSessionError",
    "LocalRuntime",
    "dev_main",
    "host_websocket_url",
]

DEV_PATH = "/ws/v1/dev/runtime/"
TOKEN_ENV = "LANGBOT_DEV_TOKEN"
WATCHED_SUFFIXES = frozenset({".py", ".yaml", ".yml", ".md"})
# Folders whose files never change what the runtime loads (and can be large).
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "venv", ".venv"})
# The host closes with these when it refuses the token (before or after accepting the socket).
REFUSED_CLOSE_CODES = frozenset({4401, 4403})
MANIFEST_FILE = "manifest.yaml"
LISTENING_MARK = "listening on ws://"
# A host message carries one wire frame escaped inside JSON, so it can be somewhat larger than the frame.
_HOST_MAX_SIZE = 4 * MAX_WIRE_MESSAGE_BYTES
_LOG_PREFIX = "runtime | "

Output = Callable[[str], None]


class DevSessionError(Exception):
    """Why the session cannot go on (the host refused the token, the runtime does not start)."""


def _print(line: str) -> None:
    print(line, flush=True)


def host_websocket_url(value: str) -> str:
    """The development endpoint for `--host`: an http(s) base URL becomes ws(s)://<host>/ws/v1/dev/runtime/;
    a ws(s) URL with a path is used as given."""
    raw = value.strip()
    if "://" not in raw:
        raw = f"http://{raw}"
    parts = urlsplit(raw)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"--host must be an http(s):// or ws(s):// URL, not {value!r}")
    path = parts.path
    given_endpoint = path.rstrip("/").endswith(DEV_PATH.rstrip("/"))
    if not given_endpoint and (parts.scheme.lower() in {"http", "https"} or path in {"", "/"}):
        path = path.rstrip("/") + DEV_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


# -- the local runtime --------------------------------------------------------------------------------


class LocalRuntime:
    """The plugin runtime child: `python -m langbot_sdk.runtime --listen 127.0.0.1:0`, loading only the
    plugin under development, with a random token only this process knows."""

    def __init__(self, plugin_dir: Path, *, out: Output = _print, python: str = sys.executable) -> None:
        self.plugin_dir = plugin_dir
        self.out = out
        self.python = python
        self.token = ""
        self.url = ""
        self.process: asyncio.subprocess.Process | None = None
        self._pumps: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None and bool(self.url)

    @property
    def exited_by_itself(self) -> bool:
        """The child ended without being asked to (a crash, a plugin that called exit)."""
        return self.process is not None and self.process.returncode is not None and not self._stopping

    def command(self) -> list[str]:
        args = [self.python, "-m", "langbot_sdk.runtime", "--listen", "127.0.0.1:0", "--isolation", "none"]
        if (self.plugin_dir / MANIFEST_FILE).is_file():
            # The plugin directory itself: its siblings (other plugins next to it) stay out.
            args += ["--plugin", str(self.plugin_dir)]
        else:
            args += ["--plugins-dir", str(self.plugin_dir)]
        return args

    async def start(self, *, timeout: float = 30.0) -> None:
        self.token = secrets.token_urlsafe(32)
        self.url = ""
        self._stopping = False
        env = {key: value for key, value in os.environ.items() if key != "LANGBOT_PLUGIN_DIRS"}
        # The token travels in the environment, not argv, where any local user could read it.
        env["LANGBOT_RUNTIME_TOKEN"] = self.token
        env["PYTHONUNBUFFERED"] = "1"  # a runner's print() shows up as it happens
        self.process = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            limit=1024 * 1024,
            # Its own session: Ctrl-C in the terminal reaches this process only, which then stops the
            # child in order (connections first) instead of both racing to exit.
            start_new_session=True,
        )
        loop = asyncio.get_running_loop()
        listening: asyncio.Future[str] = loop.create_future()
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self._pumps = [
            asyncio.create_task(self._pump(self.process.stderr, listening)),
            asyncio.create_task(self._pump(self.process.stdout, None)),
        ]
        exited: asyncio.Future[Any] = asyncio.ensure_future(self.process.wait())
        waiting: set[asyncio.Future[Any]] = {listening, exited}
        try:
            done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if listening in done:
            self.url = listening.result()
            self.out(f"local runtime (pid {self.process.pid}) listening on {self.url}")
            return
        code = self.process.returncode
        await self.stop()
        if code is not None:
            raise DevSessionError(f"the local runtime exited with status {code} before listening (its output is above)")
        raise DevSessionError(f"the local runtime did not listen within {timeout:g} s (its output is above)")

    async def _pump(self, stream: asyncio.StreamReader, listening: asyncio.Future[str] | None) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over the limit: print what there is
                raw = await stream.read(64 * 1024)
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if listening is not None and not listening.done() and LISTENING_MARK in line:
                listening.set_result("ws://" + line.split(LISTENING_MARK, 1)[1].strip())
                continue
            self.out(_LOG_PREFIX + line)

    async def list_runners(self, *, timeout: float = 30.0) -> dict[str, Any]:
        """The runtime's `list_agent_runners` answer (a ListAgentRunnersResponse as JSON)."""
        transport = await connect_websocket(self.url, token=self.token)
        async with Connection(transport, name="dev-list") as connection:
            return await connection.call(Action.LIST_AGENT_RUNNERS.value, {}, timeout=timeout)

    async def stop(self, *, grace: float = 10.0) -> None:
        process = self.process
        if process is None:
            return
        self._stopping = True
        self.url = ""
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        # The pumps end at EOF; printing the child's last lines before going on keeps the log in order.
        await asyncio.gather(*self._pumps, return_exceptions=True)
        self._pumps = []


# -- watching the plugin's files ----------------------------------------------------------------------

FileChanges = set[tuple[Change, str]]
# How long the files must hold still before a reload: an editor saves in steps (temporary file, rename).
_SETTLE_MS = 200


def plugin_file_filter(root: Path) -> Callable[[Change, str], bool]:
    """watchfiles' filter for the files the runtime may load from: the watched suffixes, outside hidden and
    skipped folders, not hidden themselves."""

    def watched(change: Change, path: str) -> bool:
        parts = Path(os.path.relpath(path, root)).parts
        if not parts or any(part.startswith(".") or part in _SKIPPED_DIRS for part in parts[:-1]):
            return False
        name = parts[-1]
        return not name.startswith(".") and Path(name).suffix in WATCHED_SUFFIXES

    return watched


def plugin_files(root: Path) -> set[str]:
    """The files under root that the filter watches, by path relative to root."""
    watched = plugin_file_filter(root)
    found: set[str] = set()
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIPPED_DIRS]
        for filename in filenames:
            path = os.path.join(directory, filename)
            if watched(Change.modified, path):
                found.add(Path(os.path.relpath(path, root)).as_posix())
    return found


def file_changes(root: Path, known: set[str], changes: FileChanges) -> list[str]:
    """What a batch of watchfiles changes did to the files in ``known`` (updated in place), by path relative
    to root: changed, then added, then removed. The files on disk decide, not the events: a save can arrive
    as several of them (an editor writing a temporary file and renaming it over the old one), and a file
    created and deleted within the batch did nothing."""
    paths = {Path(os.path.relpath(path, root)).as_posix() for _, path in changes}
    changed = sorted(path for path in paths if path in known and (root / path).is_file())
    added = sorted(path for path in paths if path not in known and (root / path).is_file())
    removed = sorted(path for path in paths if path in known and not (root / path).is_file())
    known.update(added)
    known.difference_update(removed)
    return [f"{p} changed" for p in changed] + [f"{p} added" for p in added] + [f"{p} removed" for p in removed]


# -- the session --------------------------------------------------------------------------------------


@dataclass
class _LocalConn:
    websocket: ClientConnection
    pump: asyncio.Task[None] | None = None


class DevSession:
    """One `dev` run: the local runtime, the host connection (dialled again whenever it drops) and the
    relayed wire connections, one per `open` from the host."""

    def __init__(
        self,
        *,
        host_url: str,
        token: str,
        plugin_dir: Path,
        out: Output = _print,
        poll_interval: float = 0.5,
        retry_initial: float = 0.5,
        retry_max: float = 5.0,
    ) -> None:
        self.host_url = host_url
        self.token = token
        self.plugin_dir = plugin_dir
        self.out = out
        self.poll_interval = poll_interval
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.runtime = LocalRuntime(plugin_dir, out=out)
        self.report: dict[str, Any] = {"runners": [], "plugins": []}
        self._host: ClientConnection | None = None
        self._send_lock = asyncio.Lock()
        # Held while the runtime restarts: an `open` waits for the new runtime instead of failing.
        self._runtime_lock = asyncio.Lock()
        self._conns: dict[str, _LocalConn] = {}
        self._fatal: str | None = None

    async def run(self) -> None:
        """Run until cancelled (Ctrl-C) or the host refuses the session (DevSessionError)."""
        self.out(f"starting the local runtime for {self.plugin_dir}")
        try:
            await self.runtime.start()
            self.report = await self._list_runners()
            self._print_report(None, self.report)
            watcher = asyncio.create_task(self._watch(), name="dev-watch")
            try:
                await self._host_loop()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
        finally:
            await self._close_all_conns(notify=False)
            await self.runtime.stop()

    # -- the host connection --------------------------------------------------------------------------

    async def _host_loop(self) -> None:
        # Dialling is retried for as long as the session runs, the wait doubling from retry_initial up to
        # retry_max; a session that registered and then ended starts over from retry_initial.
        dial = AsyncRetrying(
            retry=retry_if_result(lambda problem: problem is not None),
            wait=wait_exponential(multiplier=self.retry_initial, max=self.retry_max),
            before_sleep=self._say_dialling_again,
        )
        while True:
            await dial(self._connect_once)  # returns once a registered session has ended
            self.out(f"the host closed the connection; connecting again in {self.retry_initial:g} s")
            await asyncio.sleep(self.retry_initial)

    def _say_dialling_again(self, attempt: RetryCallState) -> None:
        problem = attempt.outcome.result() if attempt.outcome is not None else "the host is unreachable"
        delay = attempt.next_action.sleep if attempt.next_action is not None else self.retry_initial
        self.out(f"{problem}; connecting again in {delay:g} s")

    async def _connect_once(self) -> str | None:
        """One connection to the host, served until it closes. None when it registered; else why not."""
        try:
            websocket = await connect(
                self.host_url,
                additional_headers={"Authorization": f"Bearer {self.token}"},
                max_size=_HOST_MAX_SIZE,
                open_timeout=10,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN, HTTPStatus.NOT_FOUND):
                # A LangBot host accepts the socket and then says why it refuses a token, so a refusal at
                # the handshake is most often an address that is not its development endpoint.
                raise DevSessionError(
                    f"the host refused the connection to {self.host_url} (HTTP {status}): check --host (the "
                    "address you open the host's admin at) and --token (a development token from its admin)"
                ) from exc
            return f"the host answered the handshake with HTTP {status}"
        except InvalidURI as exc:
            raise DevSessionError(f"bad host URL: {exc}") from exc
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            return f"cannot reach the host at {self.host_url} ({exc or type(exc).__name__})"
        self.out(f"connected to {self.host_url}")
        registered = await self._serve_host(websocket)
        if self._fatal is not None:
            raise DevSessionError(self._fatal)
        if websocket.close_code in REFUSED_CLOSE_CODES:
            reason = websocket.close_reason or "the development token is wrong, expired or revoked"
            raise DevSessionError(f"the host refused the session ({websocket.close_code}): {reason}")
        return None if registered else "the host closed the connection before registering the runners"

    async def _serve_host(self, websocket: ClientConnection) -> bool:
        registered = False
        self._host = websocket
        try:
            with contextlib.suppress(ConnectionClosed):
                # A host that refuses the session may close before reading this; its `error` is read below.
                await self._send({"type": "runners", "report": self.report})
            async for message in websocket:
                if isinstance(message, bytes):
                    continue  # the envelope is text; nothing binary is defined
                try:
                    envelope = json.loads(message)
                except json.JSONDecodeError:
                    self.out("ignored a message from the host that is not JSON")
                    continue
                if not isinstance(envelope, dict):
                    continue
                if envelope.get("type") == "registered":
                    registered = True
                if await self._on_host_message(envelope):
                    break
        except ConnectionClosed:
            pass
        finally:
            self._host = None
            await self._close_all_conns(notify=False)
            await websocket.close()
        return registered

    async def _on_host_message(self, envelope: Mapping[str, Any]) -> bool:
        """Act on one host message; True when the session must end."""
        kind = envelope.get("type")
        conn = envelope.get("conn")
        if kind == "registered":
            self._print_registered(envelope)
        elif kind == "error":
            code = envelope.get("code") or "error"
            self._fatal = f"the host refused the session: {envelope.get('message') or 'no reason given'} ({code})"
            return True
        elif kind == "open" and isinstance(conn, str):
            await self._open(conn)
        elif kind == "frame" and isinstance(conn, str):
            data = envelope.get("data")
            local = self._conns.get(conn)
            if local is None:
                await self._send({"type": "close", "conn": conn})
            elif isinstance(data, str):
                with contextlib.suppress(ConnectionClosed):  # its pump reports the close
                    await local.websocket.send(data)
        elif kind == "close" and isinstance(conn, str):
            await self._close_conn(conn, notify=False)
        return False

    async def _send(self, envelope: Mapping[str, Any]) -> None:
        websocket = self._host
        if websocket is None:
            return
        text = json.dumps(envelope, separators=(",", ":"))
        async with self._send_lock:
            await websocket.send(text)

    # -- relayed connections --------------------------------------------------------------------------

    async def _open(self, conn: str) -> None:
        if conn in self._conns:
            await self._send({"type": "open_failed", "conn": conn, "error": f"connection {conn} is already open"})
            return
        async with self._runtime_lock:
            if not self.runtime.running:
                error = "the local runtime is not running (it exited; edit a file to restart it)"
                await self._send({"type": "open_failed", "conn": conn, "error": error})
                return
            try:
                websocket = await connect(
                    self.runtime.url,
                    additional_headers={"Authorization": f"Bearer {self.runtime.token}"},
                    max_size=None,  # the runtime enforces the wire's cap itself
                    compression=None,
                    open_timeout=10,
                )
            except Exception as exc:
                await self._send({"type": "open_failed", "conn": conn, "error": f"local runtime: {exc}"})
                return
        local = _LocalConn(websocket)
        self._conns[conn] = local
        # `opened` goes before any frame: the pump starts after it is sent.
        await self._send({"type": "opened", "conn": conn})
        local.pump = asyncio.create_task(self._pump_local(conn, local), name=f"dev-conn {conn}")

    async def _pump_local(self, conn: str, local: _LocalConn) -> None:
        try:
            async for message in local.websocket:
                data = message if isinstance(message, str) else message.decode("utf-8", "replace")
                await self._send({"type": "frame", "conn": conn, "data": data})
        except ConnectionClosed:
            pass
        finally:
            if self._conns.get(conn) is local:  # the runtime closed it, not the host nor a reload
                del self._conns[conn]
                with contextlib.suppress(ConnectionClosed):
                    await self._send({"type": "close", "conn": conn})

    async def _close_conn(self, conn: str, *, notify: bool) -> None:
        local = self._conns.pop(conn, None)
        if local is None:
            return
        await local.websocket.close()
        if local.pump is not None and local.pump is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await local.pump
        if notify:
            with contextlib.suppress(ConnectionClosed):
                await self._send({"type": "close", "conn": conn})

    async def _close_all_conns(self, *, notify: bool) -> None:
        for conn in list(self._conns):
            await self._close_conn(conn, notify=notify)

    # -- reload ---------------------------------------------------------------------------------------

    async def _watch(self) -> None:
        # watchfiles waits on the OS's file events; its timeout every poll_interval is when a runtime that
        # exited by itself is noticed.
        known = plugin_files(self.plugin_dir)
        async for changes in awatch(
            self.plugin_dir,
            watch_filter=plugin_file_filter(self.plugin_dir),
            step=_SETTLE_MS,
            rust_timeout=max(1, round(self.poll_interval * 1000)),
            yield_on_timeout=True,
        ):
            described = file_changes(self.plugin_dir, known, changes)
            if not described:
                if self.runtime.exited_by_itself:
                    code = self.runtime.process.returncode if self.runtime.process else None
                    self.out(f"the local runtime exited with status {code}; edit a file to restart it")
                    await self._runtime_gone()
                continue
            self.out("reloading: " + ", ".join(described))
            try:
                await self.reload()
            except Exception as exc:  # the session outlives a failed reload: the next save tries again
                self.out(f"reload failed: {type(exc).__name__}: {exc}")

    async def _runtime_gone(self) -> None:
        """The child died on its own: close the relayed connections and wait for a change."""
        await self._close_all_conns(notify=True)
        await self.runtime.stop()
        self.runtime.process = None

    async def reload(self) -> None:
        """Restart the runtime on the plugin's current files and report its runners to the host again."""
        async with self._runtime_lock:
            await self._close_all_conns(notify=True)
            await self.runtime.stop()
            previous = self.report
            try:
                await self.runtime.start()
                self.report = await self._list_runners()
            except (DevSessionError, WireError) as exc:
                self.out(f"the local runtime did not start: {exc}")
                self.report = {
                    "runners": [],
                    "plugins": [{"path": str(self.plugin_dir), "status": "error", "error": str(exc)}],
                }
            self._print_report(previous, self.report)
        with contextlib.suppress(ConnectionClosed):
            await self._send({"type": "runners", "report": self.report})

    async def _list_runners(self) -> dict[str, Any]:
        try:
            return await self.runtime.list_runners()
        except WireError as exc:
            raise DevSessionError(f"the local runtime did not list its runners: {exc}") from exc

    # -- what the author reads ------------------------------------------------------------------------

    def _print_report(self, previous: Mapping[str, Any] | None, report: Mapping[str, Any]) -> None:
        ids = [str(runner.get("id")) for runner in report.get("runners", [])]
        if previous is None:
            listed = ", ".join(ids) if ids else "none"
            self.out(f"local runtime: {len(ids)} runner(s): {listed}")
            if not report.get("plugins"):
                self.out(f"  no plugin in {self.plugin_dir}: a plugin directory holds a {MANIFEST_FILE}")
        else:
            before = {str(runner.get("id")) for runner in previous.get("runners", [])}
            for runner_id in ids:
                self.out(f"  {'reloaded' if runner_id in before else 'new'}: {runner_id}")
            for runner_id in sorted(before - set(ids)):
                self.out(f"  no longer loads: {runner_id}")
        for plugin in report.get("plugins", []):
            if plugin.get("status") == "error":
                name = "/".join(filter(None, [plugin.get("author"), plugin.get("name")])) or plugin.get("path")
                self.out(f"  plugin {name} failed to load: {plugin.get('error')}")
            for warning in plugin.get("warnings") or []:
                self.out(f"  warning: {warning}")

    def _print_registered(self, envelope: Mapping[str, Any]) -> None:
        available = [str(runner_id) for runner_id in envelope.get("available") or []]
        workspace = envelope.get("workspace") or "?"
        listed = ": " + ", ".join(available) if available else ""
        self.out(
            f"registered {len(available)} development runner(s) for workspace {workspace} "
            f"(session {envelope.get('session') or '?'}){listed}"
        )
        if envelope.get("expires_at"):
            self.out(f"  the development token expires at {envelope['expires_at']}")
        for error in envelope.get("errors") or []:
            if isinstance(error, Mapping):
                subject = error.get("runner_id") or "runtime"
                self.out(f"  not registered: {subject}: {error.get('error')}")


def dev_main(*, host: str, token: str, directory: Path, out: Output = _print) -> int:
    """The `dev` command: 0 after Ctrl-C, 1 when the session cannot go on, 2 for bad arguments."""
    try:
        url = host_websocket_url(host)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plugin_dir = directory.expanduser().resolve()
    if not plugin_dir.is_dir():
        print(f"error: {directory} is not a directory", file=sys.stderr)
        return 2
    session = DevSession(host_url=url, token=token, plugin_dir=plugin_dir, out=out)

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signal.SIGTERM, task.cancel)
        await session.run()

    try:
        asyncio.run(main())
    except DevSessionError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        out("stopped")
    finally:
        # A second Ctrl-C can cut the orderly stop short; the child has its own session, so the terminal's
        # signal never reached it: do not leave it behind.
        process = session.runtime.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
    return 0
