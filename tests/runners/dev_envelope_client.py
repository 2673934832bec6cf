"""A small development-runtime client for the host-side tests of `/ws/v1/dev/runtime/`: it speaks the CLI's
half of the envelope (`runners`, `opened`, `frame`, `close`) against a host socket and relays to a real
local plugin runtime (`python -m langbot_sdk.runtime --listen`), so the host side is proven without the
CLI. The socket is either channels' `WebsocketCommunicator` (consumer tests) or a real WebSocket to daphne
(integration tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from langbot_sdk.protocol import Action, ListAgentRunnersResponse
from langbot_sdk.wire import Connection, Transport, TransportClosed, connect_websocket

REPO_ROOT = Path(__file__).resolve().parents[2]


class HostClosed(Exception):  # noqa: N818 - reads as what happened
    def __init__(self, code: int | None) -> None:
        super().__init__(f"the host closed the socket ({code})")
        self.code = code


class HostSocket(Protocol):
    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class CommunicatorSocket:
    """The host socket as channels' in-process `WebsocketCommunicator`."""

    def __init__(self, communicator: Any) -> None:
        self.communicator = communicator

    async def send(self, message: dict[str, Any]) -> None:
        await self.communicator.send_json_to(message)

    async def receive(self) -> dict[str, Any]:
        output = await self.communicator.receive_output(timeout=60)
        if output["type"] == "websocket.close":
            raise HostClosed(output.get("code"))
        return dict(json.loads(output["text"]))

    async def close(self) -> None:
        # The consumer's disconnect writes (runners missing, session ended): let it finish, not be cancelled.
        await self.communicator.disconnect(timeout=10)


class WebSocketHostSocket:
    """The host socket as a real WebSocket client (daphne)."""

    def __init__(self, websocket: Any) -> None:
        self.websocket = websocket

    @classmethod
    async def connect(cls, url: str, token: str) -> WebSocketHostSocket:
        from websockets.asyncio.client import connect

        websocket = await connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10)
        return cls(websocket)

    async def send(self, message: dict[str, Any]) -> None:
        await self.websocket.send(json.dumps(message))

    async def receive(self) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            return dict(json.loads(await self.websocket.recv()))
        except ConnectionClosed as exc:
            raise HostClosed(exc.rcvd.code if exc.rcvd else None) from exc

    async def close(self) -> None:
        await self.websocket.close()


class LocalRuntime:
    """`python -m langbot_sdk.runtime --listen 127.0.0.1:0` over one plugin directory, as the CLI starts it."""

    def __init__(self, plugins_dir: Path) -> None:
        self.plugins_dir = plugins_dir
        self.token = secrets.token_urlsafe(16)
        self.url = ""
        self.process: asyncio.subprocess.Process | None = None
        self.log: list[str] = []

    async def start(self) -> LocalRuntime:
        # The token in the environment, as the CLI passes it (a leading "-" would read as an option in argv).
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "LANGBOT_RUNTIME_TOKEN": self.token}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "langbot_sdk.runtime",
            "--listen",
            "127.0.0.1:0",
            "--plugins-dir",
            str(self.plugins_dir),
            cwd=str(REPO_ROOT),
            env=env,
            stderr=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
        )
        assert self.process.stderr is not None
        async with asyncio.timeout(30):
            while not self.url:
                line = (await self.process.stderr.readline()).decode(errors="replace")
                if not line:
                    raise RuntimeError("the runtime exited: " + "".join(self.log))
                self.log.append(line)
                found = re.search(r"listening on (ws://\S+)", line)
                if found:
                    self.url = found.group(1)
        self._drain = asyncio.get_running_loop().create_task(self._read_log())
        return self

    async def _read_log(self) -> None:
        assert self.process is not None
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            self.log.append(line.decode(errors="replace"))

    async def connect(self) -> Transport:
        return await connect_websocket(self.url, token=self.token)

    async def list_runners(self) -> ListAgentRunnersResponse:
        async with Connection(await self.connect(), name="dev-client") as connection:
            return ListAgentRunnersResponse.model_validate(
                await connection.call(Action.LIST_AGENT_RUNNERS, {}, timeout=30)
            )

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


class EnvelopeClient:
    """The CLI's half of the envelope: register the runtime's runners, then relay host connections to it."""

    def __init__(self, host: HostSocket, runtime: LocalRuntime) -> None:
        self.host = host
        self.runtime = runtime
        self.conns: dict[str, Transport] = {}
        self.opened: list[str] = []
        self.errors: list[dict[str, Any]] = []
        self.registrations: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed_code: int | None = None
        self.ended = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving: asyncio.Task[None] | None = None

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.host.send(message)

    async def register(self) -> dict[str, Any]:
        """Send the runtime's report; the host's `registered` answer."""
        report = await self.runtime.list_runners()
        await self._send({"type": "runners", "report": report.model_dump(mode="json")})
        if self._serving is None:
            self._serving = asyncio.get_running_loop().create_task(self._serve())
        async with asyncio.timeout(30):
            return await self.registrations.get()

    async def _serve(self) -> None:
        try:
            while True:
                message = await self.host.receive()
                kind = message.get("type")
                if kind == "registered":
                    self.registrations.put_nowait(message)
                elif kind == "error":
                    self.errors.append(message)
                elif kind == "open":
                    await self._open(str(message["conn"]))
                elif kind == "frame":
                    transport = self.conns.get(str(message["conn"]))
                    if transport is not None:
                        with contextlib.suppress(TransportClosed):
                            await transport.send(str(message["data"]).encode())
                elif kind == "close":
                    transport = self.conns.pop(str(message["conn"]), None)
                    if transport is not None:
                        await transport.close()
        except HostClosed as exc:
            self.closed_code = exc.code
        finally:
            self.ended.set()
            for transport in list(self.conns.values()):
                with contextlib.suppress(Exception):
                    await transport.close()
            self.conns.clear()

    async def _open(self, conn: str) -> None:
        try:
            transport = await self.runtime.connect()
        except Exception as exc:
            await self._send({"type": "open_failed", "conn": conn, "error": str(exc)})
            return
        self.conns[conn] = transport
        self.opened.append(conn)
        await self._send({"type": "opened", "conn": conn})
        task = asyncio.get_running_loop().create_task(self._pump(conn, transport))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pump(self, conn: str, transport: Transport) -> None:
        try:
            while True:
                frame = await transport.receive()
                await self._send({"type": "frame", "conn": conn, "data": frame.decode()})
        except TransportClosed:
            pass
        if self.conns.pop(conn, None) is not None:
            with contextlib.suppress(Exception):
                await self._send({"type": "close", "conn": conn})

    async def close_local_connections(self) -> None:
        """What the CLI does on a reload: close every local connection and say so."""
        for conn, transport in list(self.conns.items()):
            self.conns.pop(conn, None)
            await transport.close()
            await self._send({"type": "close", "conn": conn})

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.host.close()
        if self._serving is not None:
            self._serving.cancel()
            await asyncio.gather(self._serving, return_exceptions=True)


@contextlib.asynccontextmanager
async def local_runtime(plugins_dir: Path) -> AsyncIterator[LocalRuntime]:
    runtime = await LocalRuntime(plugins_dir).start()
    try:
        yield runtime
    finally:
        await runtime.stop()


DEV_PLUGIN_MANIFEST = """\
apiVersion: langbot/v1
kind: Plugin
metadata:
  author: devtester
  name: devbot
  version: 0.1.0
  label: Dev bot (tests only)
  description: A runner connected with a development token.
spec:
  components:
    AgentRunner:
      fromDirs:
        - path: components/agent_runner/
"""

DEV_RUNNER_YAML = """\
apiVersion: langbot/v1
kind: AgentRunner
metadata:
  name: default
  label: Dev bot
  description: Counts the conversation's messages in state and replies with its reply prefix.
spec:
  capabilities:
    streaming: true
    interrupt: true
  permissions:
    history: [page]
  context:
    ownership: self_managed
execution:
  python:
    path: default.py
    attr: DevBot
"""

DEV_RUNNER_PY = """\
import asyncio

from langbot_sdk.protocol import AgentAPIException, AgentRunContext, AgentRunResult
from langbot_sdk.proxy import channel_for_run
from langbot_sdk.runner import AgentRunner

REPLY_PREFIX = "{prefix}"


class DevBot(AgentRunner):
    async def run(self, ctx: AgentRunContext):
        text = ctx.input.text or ""
        if text == "probe":
            # Past the SDK's own check, straight to the host: history search is not in the manifest.
            try:
                await channel_for_run(ctx.run_id).call(
                    "history_search", {{"run_id": ctx.run_id, "query": "x"}}, timeout=30
                )
                outcome = "allowed"
            except AgentAPIException as exc:
                outcome = exc.error.code
            yield AgentRunResult.message_completed(ctx.run_id, f"probe:{{outcome}}")
            return
        if text == "wait":
            yield AgentRunResult.message_delta(ctx.run_id, "waiting ")
            await asyncio.sleep(120)
        api = self.run_api(ctx)
        count = int((await api.state.get("conversation", "dev.count")).value or 0) + 1
        await api.state.set("conversation", "dev.count", count)
        yield AgentRunResult.message_completed(ctx.run_id, f"{{REPLY_PREFIX}}:{{text}}:{{count}}")
"""

DEV_RUNNER_ID = "plugin:devtester/devbot/default"


def dev_plugin_write(root: Path, prefix: str = "DEV1") -> Path:
    """A plugin directory `root/devbot` holding one runner; returns the directory to run a runtime over."""
    plugin = root / "devbot"
    (plugin / "components" / "agent_runner").mkdir(parents=True, exist_ok=True)
    (plugin / "manifest.yaml").write_text(DEV_PLUGIN_MANIFEST)
    (plugin / "components" / "agent_runner" / "default.yaml").write_text(DEV_RUNNER_YAML)
    (plugin / "components" / "agent_runner" / "default.py").write_text(DEV_RUNNER_PY.format(prefix=prefix))
    return root
