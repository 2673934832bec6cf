"""`python -m langbot_sdk dev` against a host that speaks the development envelope (/tmp/dev-envelope.md,
pinned in langbot_sdk.dev): registration, a run relayed through the real local runtime child (proxy calls
included), reload on an edit, a refused token, a host that restarts, Ctrl-C.

The host here is a small `websockets` server in the test speaking the host's side of the envelope; the
runtime is the real `python -m langbot_sdk.runtime` child the command starts. The real host's consumer is
covered by the host's own tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from watchfiles import Change
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from langbot_sdk.__main__ import main as cli_main
from langbot_sdk.dev import (
    DEV_PATH,
    DevSession,
    DevSessionError,
    file_changes,
    host_websocket_url,
    plugin_file_filter,
    plugin_files,
)
from langbot_sdk.scaffold import plugin_scaffold
from langbot_sdk.wire import CallInfo, Connection, TransportClosed
from tests.sdk.conftest import build_context, runtime_env

GOOD_TOKEN = "lbdev_good-token"
ECHO_ID = "plugin:alice/echo/default"
WEATHER_ID = "plugin:alice/weather/default"
WAIT = 30.0


class FakeDevHost:
    """The host's side of the envelope: checks the bearer token, answers `runners` with `registered`,
    records every message, and relays wire frames for the connections it opens."""

    def __init__(self, *, refuse_with: str = "error") -> None:
        self.refuse_with = refuse_with  # "error": accept, send `error`, close 4401; "http": 401 at handshake
        self.port = 0
        self.messages: list[dict[str, Any]] = []
        self.connections = 0
        self._server: Server | None = None
        self._websocket: ServerConnection | None = None
        self._inboxes: dict[str, asyncio.Queue[str | None]] = {}
        self._changed = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", self.port, process_request=self._check)
        self.port = next(int(sock.getsockname()[1]) for sock in self._server.sockets)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def _check(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path != DEV_PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
        if self.refuse_with == "http" and request.headers.get("Authorization") != f"Bearer {GOOD_TOKEN}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "unauthorized\n")
        return None

    async def _handle(self, websocket: ServerConnection) -> None:
        if websocket.request is None or websocket.request.headers.get("Authorization") != f"Bearer {GOOD_TOKEN}":
            error = {"type": "error", "code": "dev_token_invalid", "message": "the development token has expired"}
            await websocket.send(json.dumps(error))
            await websocket.close(4401, "development token refused")
            return
        self.connections += 1
        self._websocket = websocket
        session = uuid.uuid4().hex
        try:
            async for raw in websocket:
                message = json.loads(raw)
                self.messages.append(message)
                self._changed.set()
                kind, conn = message["type"], message.get("conn")
                if kind == "runners":
                    report = message["report"]
                    registered = {
                        "type": "registered",
                        "session": session,
                        "workspace": "acme",
                        "expires_at": "2026-12-01T00:00:00+00:00",
                        "available": [runner["id"] for runner in report["runners"]],
                        "errors": [
                            {"error": plugin["error"]} for plugin in report["plugins"] if plugin["status"] == "error"
                        ],
                    }
                    await websocket.send(json.dumps(registered))
                elif kind == "frame":
                    self._inboxes[conn].put_nowait(message["data"])
                elif kind == "close" and conn in self._inboxes:
                    self._inboxes[conn].put_nowait(None)
        except ConnectionClosed:
            pass

    async def wait_for(self, kind: str, *, count: int = 1, conn: str | None = None) -> dict[str, Any]:
        """The count-th message of this kind (for conn, if given), waiting for it to arrive."""

        def matching() -> list[dict[str, Any]]:
            return [m for m in self.messages if m["type"] == kind and (conn is None or m.get("conn") == conn)]

        async def wait() -> dict[str, Any]:
            while len(matching()) < count:
                self._changed.clear()
                await self._changed.wait()
            return matching()[count - 1]

        return await asyncio.wait_for(wait(), WAIT)

    async def open(self, conn: str, *, handlers: dict[str, Any] | None = None) -> Connection:
        """Ask the CLI for a wire connection to its runtime, as a worker does; frames go through the CLI."""
        assert self._websocket is not None
        self._inboxes[conn] = asyncio.Queue()
        opened_before = len([m for m in self.messages if m["type"] == "opened" and m["conn"] == conn])
        await self._websocket.send(json.dumps({"type": "open", "conn": conn}))
        await self.wait_for("opened", conn=conn, count=opened_before + 1)
        connection = Connection(_RelayTransport(self, conn), handlers=handlers, name=f"relay {conn}")
        await connection.start()
        return connection

    async def send(self, message: dict[str, Any]) -> None:
        assert self._websocket is not None
        await self._websocket.send(json.dumps(message))


class _RelayTransport:
    """A wire Transport whose frames travel as `frame` messages through the CLI."""

    def __init__(self, host: FakeDevHost, conn: str) -> None:
        self.host = host
        self.conn = conn

    async def send(self, frame: bytes) -> None:
        try:
            await self.host.send({"type": "frame", "conn": self.conn, "data": frame.decode()})
        except ConnectionClosed as exc:
            raise TransportClosed(str(exc)) from exc

    async def receive(self) -> bytes:
        data = await self.host._inboxes[self.conn].get()
        if data is None:
            raise TransportClosed("the CLI closed the connection")
        return data.encode()

    async def close(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.host.send({"type": "close", "conn": self.conn})


@pytest.fixture
async def fake_host() -> AsyncIterator[FakeDevHost]:
    host = FakeDevHost()
    await host.start()
    try:
        yield host
    finally:
        with contextlib.suppress(Exception):
            await host.stop()


class Lines(list[str]):
    async def wait_for(self, pattern: str, *, count: int = 1) -> str:
        async def wait() -> str:
            while True:
                found = [line for line in self if re.search(pattern, line)]
                if len(found) >= count:
                    return found[count - 1]
                await asyncio.sleep(0.05)

        try:
            return await asyncio.wait_for(wait(), WAIT)
        except TimeoutError:
            pytest.fail(f"no line matching {pattern!r} (x{count}) in:\n" + "\n".join(self))


@contextlib.asynccontextmanager
async def dev_session(
    host: FakeDevHost, plugin_dir: Path
) -> AsyncIterator[tuple[Lines, asyncio.Task[None], DevSession]]:
    lines = Lines()
    session = DevSession(
        host_url=host_websocket_url(host.url),
        token=GOOD_TOKEN,
        plugin_dir=plugin_dir,
        out=lines.append,
        poll_interval=0.1,
        retry_initial=0.1,
        retry_max=0.5,
    )
    task = asyncio.create_task(session.run())
    try:
        yield lines, task, session
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, DevSessionError):
            await task
        assert session.runtime.process is None or session.runtime.process.returncode is not None


def _run_stream(connection: Connection, runner_id: str, context: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    return connection.stream("run_agent", {"runner_id": runner_id, "runner_name": "default", "context": context})


async def _run_text(connection: Connection, runner_id: str, text: str) -> tuple[list[str], str | None]:
    deltas: list[str] = []
    completed = None
    async for item in _run_stream(connection, runner_id, build_context(text)):
        if item["type"] == "message.delta":
            deltas.append(item["data"]["chunk"]["content"])
        if item["type"] == "message.completed":
            completed = item["data"]["message"]["content"]
    return deltas, completed


def _echo(tmp_path: Path) -> Path:
    return plugin_scaffold("alice/echo", template="echo", directory=tmp_path / "plugins" / "echo")


def test_host_addresses_become_the_development_endpoint() -> None:
    assert host_websocket_url("http://localhost:8000") == "ws://localhost:8000/ws/v1/dev/runtime/"
    assert host_websocket_url("https://bots.example.com/") == "wss://bots.example.com/ws/v1/dev/runtime/"
    assert host_websocket_url("https://example.com/langbot") == "wss://example.com/langbot/ws/v1/dev/runtime/"
    assert host_websocket_url("localhost:8000") == "ws://localhost:8000/ws/v1/dev/runtime/"
    assert host_websocket_url("wss://example.com/custom/") == "wss://example.com/custom/"
    assert host_websocket_url("ws://h:1/ws/v1/dev/runtime/") == "ws://h:1/ws/v1/dev/runtime/"
    with pytest.raises(ValueError, match="http"):
        host_websocket_url("ftp://example.com")


def test_dev_without_a_token_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.delenv("LANGBOT_DEV_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli_main(["dev", "--host", "http://localhost:8000"])
    assert exited.value.code == 2
    assert "LANGBOT_DEV_TOKEN" in capsys.readouterr().err


async def test_it_registers_only_the_authors_plugin_and_prints_the_answer(
    fake_host: FakeDevHost, tmp_path: Path
) -> None:
    plugin = _echo(tmp_path)
    plugin_scaffold("alice/neighbour", directory=tmp_path / "plugins" / "neighbour")  # next to it, not loaded

    async with dev_session(fake_host, plugin) as (lines, _, _):
        runners = await fake_host.wait_for("runners")
        line = await lines.wait_for("registered")
        await lines.wait_for("the development token expires at 2026-12-01T00:00:00")

    assert [runner["id"] for runner in runners["report"]["runners"]] == [ECHO_ID]
    assert [(p["name"], p["status"]) for p in runners["report"]["plugins"]] == [("echo", "loaded")]
    assert "1 development runner(s) for workspace acme" in line
    assert ECHO_ID in line


async def test_a_run_is_relayed_through_the_local_runtime_with_its_proxy_calls(
    fake_host: FakeDevHost, tmp_path: Path
) -> None:
    plugin = plugin_scaffold("alice/weather", template="llm", directory=tmp_path / "weather")
    asked: list[dict[str, Any]] = []

    async def model_stream(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        asked.append(data)
        for part in ("Sunny ", "all day."):
            yield {"delta": {"role": "assistant", "content": part}}

    async with dev_session(fake_host, plugin) as (lines, _, _):
        await fake_host.wait_for("runners")
        connection = await fake_host.open("c1", handlers={"invoke_llm_stream": model_stream})
        context = build_context(
            "weather?",
            config={"model": "gpt"},
            resources={"models": [{"model_id": "gpt", "operations": ["stream"]}]},
        )
        items = [item async for item in _run_stream(connection, WEATHER_ID, context)]
        # The runtime's log reaches the terminal, prefixed.
        await lines.wait_for(r"^runtime \| .*host connection ws-\d+ opened")
        await connection.close()
        # The host's `close` reaches the runtime: the CLI closed its local connection.
        await lines.wait_for(r"^runtime \| .*host connection ws-\d+ closed")

    assert [item["data"]["chunk"]["content"] for item in items if item["type"] == "message.delta"] == [
        "Sunny ",
        "all day.",
    ]
    completed = [item["data"]["message"]["content"] for item in items if item["type"] == "message.completed"]
    assert completed == ["Sunny all day."]
    assert items[-1]["type"] == "run.completed"
    assert asked[0]["model_id"] == "gpt"
    assert asked[0]["messages"][-1] == {"role": "user", "content": "weather?"}


async def test_an_edit_reloads_the_runtime_and_reports_the_runners_again(
    fake_host: FakeDevHost, tmp_path: Path
) -> None:
    plugin = _echo(tmp_path)
    code = plugin / "components" / "agent_runner" / "default.py"

    async with dev_session(fake_host, plugin) as (lines, task, _):
        await fake_host.wait_for("runners")
        before = await fake_host.open("c1")
        assert (await _run_text(before, ECHO_ID, "hello"))[1] == "hello"

        code.write_text(code.read_text().replace('str(ctx.config.get("prefix") or "")', 'print("v2 ran") or "v2: "'))
        await fake_host.wait_for("runners", count=2)
        await fake_host.wait_for("close", conn="c1")  # the old runtime's connection is gone
        await lines.wait_for(r"reloading: components/agent_runner/default.py changed")
        await lines.wait_for(rf"reloaded: {ECHO_ID}")
        after = await fake_host.open("c2")
        assert (await _run_text(after, ECHO_ID, "hello"))[1] == "v2: hello"
        await lines.wait_for(r"^runtime \| v2 ran$")  # the runner's own print, as it happens

        code.write_text("this is not python (\n")
        broken = await fake_host.wait_for("runners", count=3)
        await lines.wait_for(rf"no longer loads: {ECHO_ID}")
        failure = await lines.wait_for(r"plugin alice/echo failed to load: .*SyntaxError|failed to load: .*syntax")
        assert not task.done()  # the session goes on, waiting for the fix

    assert broken["report"]["runners"] == []
    assert broken["report"]["plugins"][0]["status"] == "error"
    assert "default.py" in failure


async def test_a_host_that_goes_away_and_comes_back_gets_the_runners_again(
    fake_host: FakeDevHost, tmp_path: Path
) -> None:
    plugin = _echo(tmp_path)

    async with dev_session(fake_host, plugin) as (lines, task, _):
        await fake_host.wait_for("runners")
        await lines.wait_for("registered")
        await fake_host.stop()  # `make run` restarted
        await lines.wait_for("the host closed the connection; connecting again")
        await lines.wait_for("cannot reach the host")
        await fake_host.start()  # the same port
        again = await fake_host.wait_for("runners", count=2)
        await lines.wait_for("registered", count=2)
        assert not task.done()
        connection = await fake_host.open("c1")
        assert (await _run_text(connection, ECHO_ID, "back")) == ([], "back")

    assert fake_host.connections == 2
    assert [runner["id"] for runner in again["report"]["runners"]] == [ECHO_ID]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "langbot_sdk", "dev", *args]


@pytest.mark.parametrize(
    ("refuse_with", "printed"),
    [
        ("error", "the development token has expired (dev_token_invalid)"),
        ("http", "the host refused the connection to ws://127.0.0.1:"),
    ],
)
async def test_a_refused_token_ends_the_command_with_the_reason(tmp_path: Path, refuse_with: str, printed: str) -> None:
    host = FakeDevHost(refuse_with=refuse_with)
    await host.start()
    try:
        process = await asyncio.create_subprocess_exec(
            *_cli("--host", host.url, "--token", "lbdev_wrong", "--dir", str(_echo(tmp_path))),
            cwd=tmp_path,
            env=runtime_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), WAIT)
    finally:
        await host.stop()

    assert process.returncode == 1
    assert printed in err.decode()
    assert "Traceback" not in err.decode()
    assert host.connections == 0


def _ctrl_c_as_in_a_terminal() -> None:
    # A suite started in the background by a non-interactive shell inherits SIGINT ignored, and so would the
    # CLI (Python keeps an ignored SIGINT ignored); in a terminal it is the default, which this test is about.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_ctrl_c_stops_the_local_runtime(fake_host: FakeDevHost, tmp_path: Path) -> None:
    env = {**runtime_env(), "LANGBOT_DEV_TOKEN": GOOD_TOKEN}
    process = await asyncio.create_subprocess_exec(
        *_cli("--host", fake_host.url, "--dir", str(_echo(tmp_path))),
        cwd=tmp_path,  # outside the repository: the installed SDK is what runs
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:

        async def until_registered() -> None:
            assert process.stdout is not None
            while not any("registered" in line for line in seen):
                line = (await process.stdout.readline()).decode()
                if not line:
                    return
                seen.append(line)

        await asyncio.wait_for(until_registered(), WAIT)
        pids = [int(m.group(1)) for line in seen if (m := re.search(r"local runtime \(pid (\d+)\)", line))]
        assert pids, seen
        process.send_signal(signal.SIGINT)
        rest, err = await asyncio.wait_for(process.communicate(), WAIT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
            # Its runtime has a session of its own, which the kill does not reach.
            for line in seen:
                if found := re.search(r"local runtime \(pid (\d+)\)", line):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(found.group(1)), signal.SIGKILL)

    assert process.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
    assert "stopped" in rest.decode()
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


async def test_a_runtime_that_dies_is_reported_and_comes_back_on_the_next_edit(
    fake_host: FakeDevHost, tmp_path: Path
) -> None:
    plugin = _echo(tmp_path)

    async with dev_session(fake_host, plugin) as (lines, task, session):
        await fake_host.wait_for("runners")
        await fake_host.open("c1")
        assert session.runtime.process is not None
        os.kill(session.runtime.process.pid, signal.SIGKILL)
        await lines.wait_for(r"the local runtime exited with status -9; edit a file to restart it")
        await fake_host.wait_for("close", conn="c1")
        await fake_host.send({"type": "open", "conn": "c2"})
        failed = await fake_host.wait_for("open_failed", conn="c2")

        (plugin / "README.md").write_text("# echo\n\nnow documented\n")
        await lines.wait_for("reloading: README.md changed")
        await fake_host.wait_for("runners", count=2)
        connection = await fake_host.open("c3")
        assert (await _run_text(connection, ECHO_ID, "alive")) == ([], "alive")
        assert not task.done()

    assert "not running" in failed["error"]


def test_a_save_by_rename_reads_as_changed_a_new_file_as_added_and_a_deleted_one_as_removed(tmp_path):
    (tmp_path / "default.py").write_text("old")
    (tmp_path / "README.md").write_text("readme")
    known = plugin_files(tmp_path)
    # An editor's save: a temporary file renamed over the old one, which the OS reports as the file added.
    (tmp_path / ".default.py.swp").write_text("new")
    os.replace(tmp_path / ".default.py.swp", tmp_path / "default.py")
    (tmp_path / "tool.py").write_text("")
    (tmp_path / "README.md").unlink()
    events = {
        (Change.added, str(tmp_path / "default.py")),
        (Change.added, str(tmp_path / "tool.py")),
        (Change.deleted, str(tmp_path / "README.md")),
    }

    assert file_changes(tmp_path, known, events) == ["default.py changed", "tool.py added", "README.md removed"]
    assert known == {"default.py", "tool.py"}


def test_the_watcher_ignores_hidden_cached_and_unloadable_files(tmp_path):
    watched = plugin_file_filter(tmp_path)

    assert watched(Change.modified, str(tmp_path / "components" / "default.yaml"))
    assert not watched(Change.modified, str(tmp_path / "__pycache__" / "default.py"))
    assert not watched(Change.modified, str(tmp_path / ".git" / "config.yaml"))
    assert not watched(Change.modified, str(tmp_path / ".default.py"))
    assert not watched(Change.modified, str(tmp_path / "notes.txt"))
