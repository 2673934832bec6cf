"""Fixtures for the SDK tests: run contexts, and a real plugin runtime child process driven as the host."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from langbot_sdk.wire import Connection, Handler, spawn_stdio_transport

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DIR = REPO_ROOT / "plugins"
QA_RUNNER_ID = "plugin:langbot/qa-runner/default"
QA_IDENTITY = "langbot/qa-runner"


def runtime_env() -> dict[str, str]:
    """The environment of a runtime child: importable SDK, and none of the host's secrets."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DJANGO_SECRET_KEY"}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("LANGBOT_PLUGIN_DIRS", None)
    return env


def build_context(
    text: str = "",
    *,
    run_id: str | None = None,
    deadline_at: float | None = None,
    config: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
    available_apis: Mapping[str, bool] | None = None,
    conversation_id: str = "conv-1",
) -> dict[str, Any]:
    """A minimal valid AgentRunContext as the host would send it."""
    return {
        "run_id": run_id or f"run-{uuid.uuid4().hex[:12]}",
        "trigger": {"type": "message.received", "source": "api"},
        "event": {"event_id": f"evt-{uuid.uuid4().hex[:8]}", "event_type": "message.received", "source": "api"},
        "conversation": {"conversation_id": conversation_id},
        "input": {"text": text},
        "delivery": {"surface": "api"},
        "resources": dict(resources or {}),
        "context": {"conversation_id": conversation_id, "available_apis": dict(available_apis or {})},
        "runtime": {"trace_id": "trace-1", "deadline_at": deadline_at},
        "config": dict(config or {}),
    }


@pytest.fixture
def make_context() -> Callable[..., dict[str, Any]]:
    return build_context


@dataclass
class RuntimeUnderTest:
    """A runtime child process and the host-side Connection to it."""

    connection: Connection
    process: asyncio.subprocess.Process
    proxy_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def run_stream(
        self, context: dict[str, Any], runner_id: str = QA_RUNNER_ID, runner_name: str = "default"
    ) -> AsyncIterator[dict[str, Any]]:
        return self.connection.stream(
            "run_agent", {"runner_id": runner_id, "runner_name": runner_name, "context": context}
        )

    async def run(self, context: dict[str, Any], runner_id: str = QA_RUNNER_ID) -> list[dict[str, Any]]:
        return [item async for item in self.run_stream(context, runner_id)]


SpawnRuntime = Callable[..., Awaitable[RuntimeUnderTest]]


@pytest.fixture
async def spawn_runtime() -> AsyncIterator[SpawnRuntime]:
    """Start `python -m langbot_sdk.runtime --stdio` children; all are stopped after the test."""
    started: list[RuntimeUnderTest] = []

    async def spawn(
        plugin_dirs: Sequence[str | Path] = (PLUGINS_DIR,),
        handlers: Mapping[str, Handler] | None = None,
        extra_args: Sequence[str] = (),
    ) -> RuntimeUnderTest:
        argv = [sys.executable, "-m", "langbot_sdk.runtime", "--stdio", "--log-level", "WARNING", *extra_args]
        for plugin_dir in plugin_dirs:
            argv += ["--plugins-dir", str(plugin_dir)]
        transport, process = await spawn_stdio_transport(argv, env=runtime_env(), cwd=str(REPO_ROOT))
        connection = Connection(transport, handlers=handlers, name="test-host")
        await connection.start()
        runtime = RuntimeUnderTest(connection, process)
        started.append(runtime)
        return runtime

    yield spawn

    for runtime in started:
        await runtime.connection.close()
        try:
            await asyncio.wait_for(runtime.process.wait(), timeout=5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                runtime.process.kill()
            await runtime.process.wait()


@pytest.fixture
async def runtime(spawn_runtime: SpawnRuntime) -> RuntimeUnderTest:
    """A runtime loading the repository's plugins (qa-runner)."""
    return await spawn_runtime()


GOOD_RUNNER_CODE = """
from langbot_sdk.protocol import AgentRunResult
from langbot_sdk.runner import AgentRunner


class Runner(AgentRunner):
    async def run(self, ctx):
        yield AgentRunResult.message_completed(ctx.run_id, "hi from " + ctx.run_id)
"""


def write_plugin(
    root: Path,
    name: str,
    *,
    author: str = "tester",
    runner_name: str = "main",
    code: str = GOOD_RUNNER_CODE,
    attr: str = "Runner",
    manifest: str | None = None,
    runner_yaml: str | None = None,
) -> Path:
    """Write a plugin directory under `root`; pass `manifest`/`runner_yaml` text to break it on purpose."""
    plugin = root / name
    runners = plugin / "components" / "agent_runner"
    runners.mkdir(parents=True)
    (plugin / "manifest.yaml").write_text(
        manifest
        if manifest is not None
        else f"""apiVersion: langbot/v1
kind: Plugin
metadata:
  author: {author}
  name: {name}
  version: 1.0.0
  label: {name}
spec:
  components:
    AgentRunner:
      fromDirs:
        - path: components/agent_runner/
"""
    )
    (runners / f"{runner_name}.yaml").write_text(
        runner_yaml
        if runner_yaml is not None
        else f"""apiVersion: langbot/v1
kind: AgentRunner
metadata:
  name: {runner_name}
  label: {runner_name}
spec:
  capabilities: {{streaming: true}}
execution:
  python:
    path: {runner_name}.py
    attr: {attr}
"""
    )
    (runners / f"{runner_name}.py").write_text(code)
    return plugin
