"""The runtime in WebSocket mode: several hosts at once, bearer token required when configured."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from langbot_sdk.protocol import AgentAPIException
from langbot_sdk.wire import Connection, connect_websocket
from tests.sdk.conftest import PLUGINS_DIR, QA_RUNNER_ID, REPO_ROOT, build_context, runtime_env

TOKEN = "test-token-123"


@pytest.fixture
async def ws_runtime() -> AsyncIterator[str]:
    """A runtime listening on a free port; yields its ws:// URL."""
    env = runtime_env()
    env["LANGBOT_RUNTIME_TOKEN"] = TOKEN
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "langbot_sdk.runtime", "--listen", "127.0.0.1:0",
        "--plugins-dir", str(PLUGINS_DIR),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env=env, cwd=str(REPO_ROOT),
    )  # fmt: skip
    assert process.stderr is not None
    url = None
    while url is None:
        line = await asyncio.wait_for(process.stderr.readline(), timeout=15)
        assert line, "runtime exited before listening"
        match = re.search(rb"listening on (ws://\S+)", line)
        url = match.group(1).decode() if match else None

    async def drain() -> None:  # keep the child from blocking on a full stderr pipe
        assert process.stderr is not None
        while await process.stderr.readline():
            pass

    drainer = asyncio.create_task(drain())
    try:
        yield url
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), timeout=5)
        except TimeoutError:
            process.kill()
            await process.wait()
        drainer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drainer


async def open_host(url: str, token: str | None = TOKEN) -> Connection:
    connection = Connection(await connect_websocket(url, token=token), name="ws-host")
    await connection.start()
    return connection


async def test_two_hosts_run_concurrently_over_websocket(ws_runtime):
    # given two host connections to one runtime
    first, second = await open_host(ws_runtime), await open_host(ws_runtime)
    try:
        # when each starts a stream run at the same time
        contexts = [build_context("qa:stream:3 a"), build_context("qa:ok b")]

        async def run(connection: Connection, context: dict[str, Any]) -> list[dict[str, Any]]:
            request = {"runner_id": QA_RUNNER_ID, "runner_name": "default", "context": context}
            return [item async for item in connection.stream("run_agent", request)]

        results_a, results_b = await asyncio.gather(run(first, contexts[0]), run(second, contexts[1]))
    finally:
        await first.close()
        await second.close()

    # then each host got its own run's results
    assert [r["type"] for r in results_a] == ["message.delta"] * 3 + ["message.completed", "run.completed"]
    assert {r["run_id"] for r in results_a} == {contexts[0]["run_id"]}
    assert results_b[0]["data"]["message"]["content"] == "QA_OK:b"


async def test_a_host_without_the_token_is_refused(ws_runtime):
    with pytest.raises(AgentAPIException) as caught:
        await connect_websocket(ws_runtime, token="wrong")

    assert caught.value.error.code == "unauthorized"


async def test_closing_a_host_connection_cancels_its_runs_but_not_the_others(ws_runtime):
    # given one host with a long run and another host
    leaving, staying = await open_host(ws_runtime), await open_host(ws_runtime)
    request = {"runner_id": QA_RUNNER_ID, "runner_name": "default", "context": build_context("qa:slow:30 x")}
    pending = asyncio.ensure_future(leaving.stream("run_agent", request).__anext__())
    try:
        for _ in range(200):
            active_before = (await staying.call("ping", {}))["runs_active"]
            if active_before == 1:
                break
            await asyncio.sleep(0.01)
        assert active_before == 1

        # when the first host goes away
        await leaving.close()
        pending.cancel()

        # then its run is no longer active, and the other host is still served
        for _ in range(200):
            pong = await staying.call("ping", {})
            if pong["runs_active"] == 0:
                break
            await asyncio.sleep(0.01)
        assert pong["runs_active"] == 0
    finally:
        await staying.close()
