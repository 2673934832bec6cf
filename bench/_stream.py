"""Shared set-up of the streaming benchmarks: a fresh PostgreSQL database, daphne serving the real ASGI
application, a Celery worker whose plugin runtime also loads `bench/plugins/stream-probe`, a workspace
with a binding to the probe runner and an API key; and a WebSocket client that authenticates with a
one-time ticket (`POST /api/v1/ws-tickets`), exactly as an API client would.

Needs DATABASE_URL=postgres://... and Redis at REDIS_URL; prints why and exits 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from bench._host import REPO, environment_or_exit, recreate_database
from bench._stack import UserStack

PROBE_DIR = REPO / "bench" / "plugins"
PROBE_RUNNER_ID = "plugin:langbot-bench/stream-probe/probe"


@dataclass
class Stack:
    base: str
    api_key: str
    binding_id: str

    @property
    def ws_base(self) -> str:
        return self.base.replace("http://", "ws://")

    @property
    def origin(self) -> str:
        return self.base


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _setup() -> tuple[str, str]:
    from bindings.services import api_key_create
    from langbot_sdk.protocol import Action, ListAgentRunnersResponse
    from runtimes.descriptors import runner_descriptors_sync
    from runtimes.link import runtime_link
    from tests.factories import AgentBindingFactory, WorkspaceFactory

    report = ListAgentRunnersResponse.model_validate(runtime_link().call_sync(Action.LIST_AGENT_RUNNERS, {}))
    runner_descriptors_sync(report=report)
    workspace = WorkspaceFactory.create(slug="bench-stream")
    binding = AgentBindingFactory.create(
        workspace=workspace, binding_id="probe", runner_id=PROBE_RUNNER_ID, concurrency_policy="parallel"
    )
    _, key = api_key_create(workspace=workspace)
    return key, binding.binding_id


@contextlib.contextmanager
def stack(*, worker_concurrency: int = 8) -> Iterator[Stack]:
    env = environment_or_exit()
    env["LANGBOT_PLUGIN_DIRS"] = os.pathsep.join([str(REPO / "plugins"), str(PROBE_DIR)])
    env["ALLOWED_HOSTS"] = "127.0.0.1,localhost"
    os.environ.update(env)
    recreate_database(env["DATABASE_URL"])
    import django

    django.setup()
    (REPO / "var").mkdir(exist_ok=True)
    port = _free_port()
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv in (
            ("worker", [sys.executable, "-m", "celery", "-A", "langbot_host", "worker", "--pool", "threads",
                        "--concurrency", str(worker_concurrency), "--without-heartbeat", "--without-gossip",
                        "--without-mingle", "--loglevel", "WARNING"]),
            ("web", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                     "langbot_host.asgi:application"]),
        ):  # fmt: skip
            log = (REPO / "var" / f"bench-stream-{name}.log").open("wb")
            started.append(
                subprocess.Popen(argv, cwd=REPO, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            )  # fmt: skip
        key, binding_id = _setup()
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/api/v1/runners", headers={"Authorization": f"Bearer {key}"}).status_code == 200:
                    break
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                raise SystemExit("the web server or the worker did not start; see var/bench-stream-*.log")
            time.sleep(0.2)
        yield Stack(base=base, api_key=key, binding_id=binding_id)
    finally:
        for process in reversed(started):
            _stop(process)
        from runtimes.link import runtime_link_reset

        runtime_link_reset()


class ChatClient:
    """One WebSocket client of `/ws/v1/chat/`, authenticated by a one-time ticket."""

    def __init__(self, stack: Stack | UserStack, http: httpx.AsyncClient) -> None:
        self.stack = stack
        self.http = http
        self.ws: Any = None

    async def connect(self) -> None:
        import websockets
        from websockets.typing import Origin

        response = await self.http.post(
            f"{self.stack.base}/api/v1/ws-tickets", headers={"Authorization": f"Bearer {self.stack.api_key}"}
        )
        response.raise_for_status()
        url = self.stack.ws_base + response.json()["url"]
        self.ws = await websockets.connect(url, origin=Origin(self.stack.origin), max_queue=None, open_timeout=30)

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def receive(self) -> dict[str, Any]:
        while True:
            message: dict[str, Any] = json.loads(await self.ws.recv())
            if message.get("type") != "ping":
                return message

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
