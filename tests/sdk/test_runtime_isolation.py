"""Plugin isolation (`--isolation plugin`): one process per plugin behind the one runtime endpoint.

A plugin that crashes its process or exceeds its memory limit fails only its own run, with a retryable
runtime_error, while another plugin's run goes on; its process is restarted and its next run succeeds. The
host sees the same listing, runs and proxy traffic as from a runtime without isolation.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from langbot_sdk.protocol import PROXY_REQUEST_MODELS
from tests.sdk.conftest import PLUGINS_DIR, QA_IDENTITY, QA_RUNNER_ID, SpawnRuntime, write_plugin
from tests.sdk.test_runtime_proxy import ALL_APIS, ALL_RESOURCES, recording_host

ISOLATED = ("--isolation", "plugin")
FRAGILE_ID = "plugin:tester/fragile/main"

# Answers with its process id and memory limit; "crash" kills its process mid-run, "hog" asks for more
# memory than any test limit allows, "block" keeps its event loop busy for 2 s.
FRAGILE_CODE = """
import asyncio
import os
import resource
import time

from langbot_sdk.protocol import AgentRunResult
from langbot_sdk.runner import AgentRunner


class Runner(AgentRunner):
    async def run(self, ctx):
        text = ctx.input.text
        if text in ("crash", "hog"):
            yield AgentRunResult.message_delta(ctx.run_id, "about to go")
            await asyncio.sleep(0.2)
            if text == "crash":
                os._exit(1)
            hoard = bytearray(8 * 1024 * 1024 * 1024)
            yield AgentRunResult.message_completed(ctx.run_id, str(len(hoard)))
            return
        if text == "block":
            time.sleep(2)  # holds its process's event loop, as CPU-bound code does
        pid = os.getpid()
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        yield AgentRunResult.message_completed(ctx.run_id, f"{pid} {limit}")
"""

BROKEN_CODE = "raise RuntimeError('broken on purpose')\n"


@pytest.fixture
def plugin_root(tmp_path: Path) -> Path:
    """The qa-runner (as shipped), the fragile test plugin, a good one and one that fails to import."""
    (tmp_path / "qa-runner").symlink_to(PLUGINS_DIR / "qa-runner", target_is_directory=True)
    write_plugin(tmp_path, "fragile", code=FRAGILE_CODE)
    write_plugin(tmp_path, "good")
    write_plugin(tmp_path, "broken", code=BROKEN_CODE)
    return tmp_path


def reply(results: list[dict[str, Any]]) -> str:
    assert results[-1]["type"] == "run.completed", results
    content: str = results[-2]["data"]["message"]["content"]
    return content


def assert_lost_by_the_runtime(results: list[dict[str, Any]]) -> None:
    """The run ended with a retryable runtime_error after what the runner had sent, numbered on."""
    assert [result["type"] for result in results] == ["message.delta", "run.failed"], results
    failure = results[-1]["data"]
    assert failure["code"] == "runtime_error"
    assert failure["retryable"] is True
    assert [result["sequence"] for result in results] == [1, 2]


async def run_beside_qa(runtime: Any, make_context: Any, fragile_text: str) -> tuple[list[dict[str, Any]], str]:
    """A fragile run and a 1 s qa-runner run at once; the qa run must not notice the other."""
    steady = asyncio.create_task(runtime.run(make_context("qa:slow:1 steady")))
    await asyncio.sleep(0.1)
    fragile = await runtime.run(make_context(fragile_text), FRAGILE_ID)
    return fragile, reply(await steady)


async def test_a_plugin_crashing_its_process_fails_only_its_own_run_and_is_restarted(
    spawn_runtime: SpawnRuntime, make_context: Any, plugin_root: Path
) -> None:
    # given an isolated runtime whose fragile plugin answered once
    runtime = await spawn_runtime([plugin_root], extra_args=ISOLATED)
    pid_before = reply(await runtime.run(make_context("hello"), FRAGILE_ID)).split()[0]

    # when the fragile plugin kills its process mid-run while a qa-runner run is in flight
    crashed, steady = await run_beside_qa(runtime, make_context, "crash")

    # then only the fragile run failed, retryably; the qa run completed
    assert_lost_by_the_runtime(crashed)
    assert steady == "QA_SLOW:steady"
    # and the fragile plugin's next run succeeds, in a new process
    pid_after = reply(await runtime.run(make_context("hello again"), FRAGILE_ID)).split()[0]
    assert pid_after != pid_before


async def test_a_plugin_over_its_memory_limit_is_stopped_and_restarted_without_affecting_others(
    spawn_runtime: SpawnRuntime, make_context: Any, plugin_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an isolated runtime with a 512 MiB limit per plugin process
    monkeypatch.setenv("LANGBOT_PLUGIN_MEMORY_MB", "512")
    runtime = await spawn_runtime([plugin_root], extra_args=ISOLATED)
    pid_before, limit = reply(await runtime.run(make_context("hello"), FRAGILE_ID)).split()
    assert int(limit) == 512 * 1024 * 1024

    # when the fragile plugin asks for 8 GiB while a qa-runner run is in flight
    hogged, steady = await run_beside_qa(runtime, make_context, "hog")

    # then only the fragile run failed, retryably, and the qa run completed
    assert_lost_by_the_runtime(hogged)
    assert steady == "QA_SLOW:steady"
    # and the fragile plugin is back in a new process under the same limit
    pid_after, limit_after = reply(await runtime.run(make_context("hello again"), FRAGILE_ID)).split()
    assert pid_after != pid_before
    assert int(limit_after) == 512 * 1024 * 1024


async def test_listing_through_the_supervisor_is_the_union_of_the_plugins(
    spawn_runtime: SpawnRuntime, plugin_root: Path
) -> None:
    # given the same plugins served with and without isolation
    isolated = await spawn_runtime([plugin_root], extra_args=ISOLATED)
    shared = await spawn_runtime([plugin_root], extra_args=("--isolation", "none"))

    # when the host lists the runners of each
    listing = await isolated.connection.call("list_agent_runners", {})
    expected = await shared.connection.call("list_agent_runners", {})

    # then they are the same: every good plugin's runners, and the broken plugin reported with its runner
    assert listing == expected
    assert {runner["id"] for runner in listing["runners"]} == {
        QA_RUNNER_ID,
        FRAGILE_ID,
        "plugin:tester/good/main",
    }
    broken = next(report for report in listing["plugins"] if report["name"] == "broken")
    assert broken["status"] == "error"
    assert "broken on purpose" in broken["error"]
    assert broken["runner_ids"] == ["plugin:tester/broken/main"]


async def test_a_runner_id_two_plugins_provide_stays_with_the_first(
    spawn_runtime: SpawnRuntime, make_context: Any, tmp_path: Path
) -> None:
    # given two plugins declaring the same runner id (same author, name and runner)
    write_plugin(tmp_path / "a", "twin", code=FRAGILE_CODE)
    write_plugin(tmp_path / "b", "twin")
    runtime = await spawn_runtime([tmp_path / "a", tmp_path / "b"], extra_args=ISOLATED)

    # when the host lists and runs it
    listing = await runtime.connection.call("list_agent_runners", {})
    results = await runtime.run(make_context("hello"), "plugin:tester/twin/main")

    # then the first plugin serves it and the second is reported as a duplicate
    assert [runner["id"] for runner in listing["runners"]] == ["plugin:tester/twin/main"]
    assert [report["status"] for report in listing["plugins"]] == ["loaded", "error"]
    assert "duplicate runner id" in listing["plugins"][1]["error"]
    assert not reply(results).startswith("hi from")


async def test_proxy_calls_reach_the_host_that_started_the_run(
    spawn_runtime: SpawnRuntime, make_context: Any, plugin_root: Path
) -> None:
    # given a host answering every proxy action through an isolated runtime
    calls: list[tuple[str, dict[str, Any]]] = []
    runtime = await spawn_runtime([plugin_root], handlers=recording_host(calls), extra_args=ISOLATED)
    context = make_context("qa:proxy", resources=ALL_RESOURCES, available_apis=ALL_APIS)

    # when the qa runner exercises every API, streams included
    results = await runtime.run(context)

    # then every call arrived once, stamped, and every answer got back to the runner
    assert {action for action, _ in calls} == {action.value for action in PROXY_REQUEST_MODELS}
    assert all(payload["caller_plugin_identity"] == QA_IDENTITY for _, payload in calls)
    report = json.loads(reply(results))
    assert all(entry == {"ok": True, "code": None} for entry in report.values()), report


async def test_cancel_and_ping_go_through_the_supervisor(
    spawn_runtime: SpawnRuntime, make_context: Any, plugin_root: Path
) -> None:
    # given a 30 s qa run in an isolated runtime
    runtime = await spawn_runtime([plugin_root], extra_args=ISOLATED)
    context = make_context("qa:slow:30 long")
    run = asyncio.create_task(runtime.run(context))
    for _ in range(100):
        if (await runtime.connection.call("ping", {}))["runs_active"] == 1:
            break
        await asyncio.sleep(0.05)

    # when the host cancels it
    answer = await runtime.connection.call("cancel_run", {"run_id": context["run_id"], "reason": "user"})

    # then the run ends cancelled and nothing is left active
    results = await asyncio.wait_for(run, timeout=10)
    assert answer == {"cancelled": True}
    assert results[-1]["data"]["code"] == "cancelled"
    assert (await runtime.connection.call("ping", {}))["runs_active"] == 0


async def test_a_plugin_killing_its_process_at_import_is_reported_and_the_others_run(
    spawn_runtime: SpawnRuntime, make_context: Any, tmp_path: Path
) -> None:
    # given a plugin whose module ends its process when imported, next to a good one
    write_plugin(tmp_path, "suicidal", code="import os\nos._exit(7)\n")
    write_plugin(tmp_path, "good")
    runtime = await spawn_runtime([tmp_path], extra_args=ISOLATED)

    # when the host lists the runners and runs the good one
    listing = await runtime.connection.call("list_agent_runners", {})
    results = await runtime.run(make_context("hello"), "plugin:tester/good/main")

    # then the suicidal plugin is an error naming its runner (so the host marks it), the good one runs
    assert [runner["id"] for runner in listing["runners"]] == ["plugin:tester/good/main"]
    suicidal = next(report for report in listing["plugins"] if report["name"] == "suicidal")
    assert suicidal["status"] == "error"
    assert "exited with status 7" in suicidal["error"]
    assert suicidal["runner_ids"] == ["plugin:tester/suicidal/main"]
    assert reply(results).startswith("hi from")


async def test_a_plugin_hogging_its_event_loop_does_not_hold_up_another_plugin(
    spawn_runtime: SpawnRuntime, make_context: Any, plugin_root: Path
) -> None:
    # given an isolated runtime whose fragile plugin keeps its loop busy for 2 s
    runtime = await spawn_runtime([plugin_root], extra_args=ISOLATED)
    busy = asyncio.create_task(runtime.run(make_context("block"), FRAGILE_ID))
    await asyncio.sleep(0.3)

    # when a qa-runner run starts meanwhile
    steady = reply(await runtime.run(make_context("quick")))

    # then it completes while the busy plugin is still blocked, and the busy run completes later
    assert steady == "QA_OK:quick"
    assert not busy.done()
    reply(await busy)
