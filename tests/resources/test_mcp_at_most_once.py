"""A tool call is sent at most once: when a real MCP server dies while a call is running, the call fails as
`unavailable` saying its outcome is unknown, and no second server process runs it; a kept session whose
server died before the call is found dead first, and the call is sent once, on a new session."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from resources.mcp.client import MCPClientError, MCPServerConfig, mcp_tool_call, mcp_tools_list
from resources.models import MCPServer
from tests.fakes.mcp_fixtures import mcp_cleanup_fixture  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_cleanup")]

PROBE = str(Path(__file__).resolve().parent.parent / "fakes" / "mcp_probe_server.py")


def counting_server(workspace, count: Path, *, delay: float) -> MCPServerConfig:
    server = MCPServer.objects.create(
        workspace=workspace, server_id="counter", name="c", command=sys.executable,
        args=[PROBE, "--count", str(count), "--delay", str(delay)], timeout_seconds=20,
    )  # fmt: skip
    config = MCPServerConfig.of(server)
    mcp_tools_list(config)  # a live session, as a worker holds one
    return config


def executions(count: Path) -> list[int]:
    return [int(line) for line in count.read_text().split()] if count.exists() else []


def test_a_call_whose_server_dies_under_it_is_not_sent_again(workspace, tmp_path):
    count = tmp_path / "count"
    config = counting_server(workspace, count, delay=30)

    async def call_and_kill() -> MCPClientError:
        call = asyncio.ensure_future(mcp_tool_call(config, name="slow_count", arguments={}, timeout=20))
        deadline = time.monotonic() + 15
        while not executions(count):
            assert time.monotonic() < deadline, "the call never reached the server"
            await asyncio.sleep(0.02)
        os.kill(executions(count)[0], signal.SIGKILL)
        with pytest.raises(MCPClientError) as failed:
            await call
        return failed.value

    error = asyncio.run(call_and_kill())

    assert error.kind == "unavailable"
    assert "may or may not have run" in error.message
    assert "not sent again" in error.message
    assert len(executions(count)) == 1


def test_a_call_on_a_session_whose_server_died_before_it_runs_once_on_a_new_session(workspace, tmp_path):
    count = tmp_path / "count"
    config = counting_server(workspace, count, delay=0)
    first = asyncio.run(mcp_tool_call(config, name="slow_count", arguments={}, timeout=20))
    os.kill(executions(count)[0], signal.SIGKILL)

    second = asyncio.run(mcp_tool_call(config, name="slow_count", arguments={}, timeout=20))

    assert (first.text, second.text) == ("counted", "counted")
    pids = executions(count)
    assert len(pids) == 2
    assert pids[0] != pids[1]
