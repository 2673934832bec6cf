"""A stdio MCP server runs in a worker, never in the web process, with nothing of the host's secrets: daphne
and a Celery worker run as in production, each with the database URL, the secret key (and the worker the
runtime token) in its environment, and the probe server (tests/fakes/mcp_probe_server.py) reports who
started it, where and with what environment. A server created over REST connects in the background (its
status `connecting`, then `ok` with its tools, nobody asking for a refresh); a refresh over REST of a server
nobody connected yet starts it in the worker too."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from bindings.models import Workspace
from bindings.services import api_key_create
from resources.models import MCPServer
from tests.factories import WorkspaceFactory
from tests.fakes.mcp_fixtures import SERVER_SCRIPT
from tests.processes import REPO_ROOT, WebProcess, WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PROBE_SCRIPT = str(Path(SERVER_SCRIPT).with_name("mcp_probe_server.py"))
RUNTIME_TOKEN = "runtime-token-h10-5521"
# What the host processes hold and a stdio server must not see.
HOST_SECRETS = ("DATABASE_URL", "DJANGO_SECRET_KEY", "LANGBOT_RUNTIME_TOKEN", "REDIS_URL", "CELERY_BROKER_URL")


@dataclass
class Stack:
    web: WebProcess
    worker: WorkerProcess


@pytest.fixture(scope="module")
def stack(start_worker, start_web) -> Iterator[Stack]:
    """A worker and daphne of their own on a queue of their own, both allowed to run this interpreter as an
    MCP server and holding the secrets a stdio server must not get."""
    queue = f"langbot-test-mcp-{uuid.uuid4().hex[:8]}"
    shared = {
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "LANGBOT_MCP_STDIO_COMMANDS": sys.executable,
        # The test process's own key, so both read the secrets this process stores.
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
    }
    worker = start_worker(**shared, LANGBOT_RUNTIME_TOKEN=RUNTIME_TOKEN)
    web = start_web(**shared, LANGBOT_DB_POOL_MAX="8")
    yield Stack(web=web, worker=worker)
    web.stop()
    worker.stop()


@pytest.fixture
def probe_report(tmp_path: Path) -> Iterator[Path]:
    """Where the probe writes its report; a probe the worker left running is stopped after the test."""
    path = tmp_path / "probe.json"
    yield path
    if path.exists():
        with contextlib.suppress(ProcessLookupError, ValueError, KeyError):
            os.kill(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)


@pytest.fixture
def workspace() -> Workspace:
    return WorkspaceFactory.create()


@pytest.fixture
def operator_api(stack: Stack, workspace: Workspace) -> Iterator[httpx.Client]:
    """REST calls to daphne with an operator key of the workspace (stdio servers are an operator's)."""
    _, key = api_key_create(workspace=workspace, is_operator=True)
    with httpx.Client(base_url=stack.web.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        yield client


def server_when_settled(api: httpx.Client, server_id: str, timeout: float = 40) -> dict[str, Any]:
    """The server once its background connection has an outcome (polling is fine in a test)."""
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = api.get(f"/api/v1/mcp-servers/{server_id}").json()
        if body["status"] != "connecting":
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"MCP server {server_id} still connecting after {timeout}s: {body}")
        time.sleep(0.1)


def assert_started_by_the_worker(report_path: Path, stack: Stack) -> None:
    report = json.loads(report_path.read_text())
    # started by the worker process itself (thread pool: the process that holds the MCP sessions)...
    assert report["ppid"] == stack.worker.process.pid
    assert report["ppid"] != stack.web.process.pid
    # ...in a scratch directory of its own, not the repository
    cwd = Path(report["cwd"])
    assert cwd.parent.name.startswith("langbot-mcp-"), cwd
    assert cwd != REPO_ROOT
    assert REPO_ROOT not in cwd.parents
    # ...and with none of the host's secrets, by name or by value
    environ: dict[str, str] = report["environ"]
    assert not set(HOST_SECRETS) & set(environ), sorted(environ)
    values = "\n".join(environ.values())
    for secret in (settings.SECRET_KEY, RUNTIME_TOKEN, str(settings.DATABASES["default"]["NAME"])):
        assert secret not in values


def test_a_stdio_server_created_over_rest_connects_in_the_worker_in_the_background(
    stack: Stack, operator_api: httpx.Client, probe_report: Path
):
    # when an operator creates a stdio server over REST
    spec = {
        "server_id": "probe",
        "name": "Probe",
        "transport": "stdio",
        "command": sys.executable,
        "args": [PROBE_SCRIPT, "--report", str(probe_report)],
        "timeout_seconds": 20,
    }
    created = operator_api.post("/api/v1/mcp-servers", json=spec)

    # then the create answered at once, the server connecting and no tools yet
    assert created.status_code == 201, created.text
    assert (created.json()["status"], created.json()["tools"]) == ("connecting", [])
    # and, nobody asking for a refresh, the worker connected and listed the tools
    body = server_when_settled(operator_api, "probe")
    assert (body["status"], body["last_error"]) == ("ok", "")
    assert {tool["tool_name"] for tool in body["tools"]} == {"probe", "slow_count"}
    # and the server was started by the worker, in a scratch directory, without the host's secrets
    assert_started_by_the_worker(probe_report, stack)


def test_a_stdio_server_refreshed_over_rest_is_started_by_the_worker(
    stack: Stack, workspace: Workspace, operator_api: httpx.Client, probe_report: Path
):
    # given a stdio server stored but never connected (as one made before connecting on save was)
    MCPServer.objects.create(
        workspace=workspace,
        server_id="probe-refresh",
        name="Probe",
        transport=MCPServer.Transport.STDIO,
        command=sys.executable,
        args=[PROBE_SCRIPT, "--report", str(probe_report)],
        timeout_seconds=20,
    )
    assert not probe_report.exists()

    # when its tools are refreshed over REST
    refreshed = operator_api.post("/api/v1/mcp-servers/probe-refresh/refresh")

    # then the answer lists its tools
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["status"] == "ok"
    assert {tool["tool_name"] for tool in refreshed.json()["tools"]} == {"probe", "slow_count"}
    # and the server was started by the worker, in a scratch directory, without the host's secrets
    assert_started_by_the_worker(probe_report, stack)


def test_a_refresh_right_after_a_create_answers_the_tools_while_the_worker_connects(
    stack: Stack, operator_api: httpx.Client, probe_report: Path
):
    # given a stdio server just created: its background connection is under way in the worker
    spec = {
        "server_id": "probe-early",
        "name": "Probe",
        "transport": "stdio",
        "command": sys.executable,
        "args": [PROBE_SCRIPT, "--report", str(probe_report)],
        "timeout_seconds": 20,
    }
    assert operator_api.post("/api/v1/mcp-servers", json=spec).status_code == 201

    # when someone asks for a refresh at once
    refreshed = operator_api.post("/api/v1/mcp-servers/probe-early/refresh")

    # then the refresh waits for the same worker's connection and answers the tools
    assert refreshed.status_code == 200, refreshed.text
    assert {tool["tool_name"] for tool in refreshed.json()["tools"]} == {"probe", "slow_count"}
    body = server_when_settled(operator_api, "probe-early")
    assert (body["status"], len(body["tools"])) == ("ok", 2)
    assert_started_by_the_worker(probe_report, stack)
