"""The runtime process reports its runners and every plugin it could or could not load."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from langbot_sdk.protocol import ListAgentRunnersResponse
from langbot_sdk.wire import Connection, spawn_stdio_transport
from tests.sdk.conftest import PLUGINS_DIR, QA_RUNNER_ID, REPO_ROOT, runtime_env, write_plugin


def runner_code_replying(text: str) -> str:
    return (
        "from langbot_sdk.protocol import AgentRunResult\n"
        "from langbot_sdk.runner import AgentRunner\n\n"
        "class Runner(AgentRunner):\n"
        "    async def run(self, ctx):\n"
        f"        yield AgentRunResult.message_completed(ctx.run_id, {text!r})\n"
    )


async def test_list_agent_runners_reports_the_qa_runner_with_its_config_form(runtime):
    # given a runtime loading the repository's plugins
    # when the host asks for the runners
    answer = ListAgentRunnersResponse.model_validate(await runtime.connection.call("list_agent_runners", {}))

    # then the qa-runner is there, with its form and capabilities, and its plugin is reported loaded
    runners = {runner.id: runner for runner in answer.runners}
    qa = runners[QA_RUNNER_ID]
    assert qa.name == "default"
    assert qa.capabilities.streaming
    assert qa.capabilities.interrupt
    fields = {item.name: item for item in qa.config_schema}
    assert fields["behaviour"].default == "ok"
    assert {"ok", "stream", "slow", "proxy", "state"} <= {option.name for option in fields["behaviour"].options}
    assert fields["delta_count"].default == 5
    assert fields["sleep_seconds"].default == 5
    report = next(r for r in answer.plugins if r.name == "qa-runner")
    assert report.status == "loaded"
    assert report.runner_ids == [QA_RUNNER_ID]


BROKEN_PLUGINS = {
    "bad_yaml": ({"manifest": "apiVersion: langbot/v1\nkind: Plugin\nmetadata: [unclosed\n"}, "yaml"),
    "schema_error": ({"manifest": "apiVersion: langbot/v1\nkind: Plugin\nmetadata: {author: x}\n"}, "name"),
    "import_error": ({"code": "import module_that_does_not_exist\n"}, "module_that_does_not_exist"),
    "syntax_error": ({"code": "def broken(:\n"}, "SyntaxError"),
    "missing_attr": ({"attr": "NoSuchRunner"}, "NoSuchRunner"),
    "not_a_runner": ({"code": "class Runner:\n    pass\n"}, "AgentRunner"),
    "path_escape": (
        {
            "runner_yaml": (
                "kind: AgentRunner\nmetadata: {name: main, label: main}\n"
                "execution: {python: {path: ../../../../evil.py, attr: Runner}}\n"
            )
        },
        "outside",
    ),
}


@pytest.mark.parametrize("breakage", sorted(BROKEN_PLUGINS))
async def test_a_broken_plugin_is_reported_with_its_reason_while_the_others_load(spawn_runtime, tmp_path, breakage):
    # given a plugins directory with one good and one broken plugin
    overrides, reason_hint = BROKEN_PLUGINS[breakage]
    write_plugin(tmp_path, "good-plugin")
    broken_path = write_plugin(tmp_path, "broken-plugin", **overrides)
    runtime = await spawn_runtime(plugin_dirs=[tmp_path])

    # when the host lists the runners
    answer = ListAgentRunnersResponse.model_validate(await runtime.connection.call("list_agent_runners", {}))

    # then the good runner is offered, and the broken plugin is reported with a reason naming the problem
    # and the runner id it declared (so the host can mark that runner as failed), without offering it
    assert [runner.id for runner in answer.runners] == ["plugin:tester/good-plugin/main"]
    report = next(r for r in answer.plugins if r.path == str(broken_path))
    assert report.status == "error"
    manifest_unreadable = breakage in {"bad_yaml", "schema_error"}
    assert report.runner_ids == ([] if manifest_unreadable else ["plugin:tester/broken-plugin/main"])
    assert reason_hint.lower() in (report.error or "").lower()


async def test_a_plugin_repeating_an_existing_runner_id_is_skipped(spawn_runtime, tmp_path):
    # given two plugin directories that declare the same author/name/runner
    first, second = tmp_path / "a", tmp_path / "b"
    write_plugin(first, "same", code=runner_code_replying("first"))
    write_plugin(second, "same", code=runner_code_replying("second"))
    runtime = await spawn_runtime(plugin_dirs=[first, second])

    # when the host lists the runners
    answer = ListAgentRunnersResponse.model_validate(await runtime.connection.call("list_agent_runners", {}))

    # then the first one wins and the second is reported as a duplicate
    assert [runner.id for runner in answer.runners] == ["plugin:tester/same/main"]
    statuses = {report.path: (report.status, report.error or "") for report in answer.plugins}
    assert statuses[str(first / "same")][0] == "loaded"
    status, error = statuses[str(second / "same")]
    assert status == "error"
    assert "duplicate" in error


async def test_plugin_directories_come_from_the_environment_when_not_given(tmp_path):
    # given LANGBOT_PLUGIN_DIRS naming two directories, one of them the repository's plugins
    write_plugin(tmp_path, "env-plugin")
    env = runtime_env()
    env["LANGBOT_PLUGIN_DIRS"] = os.pathsep.join([str(PLUGINS_DIR), str(tmp_path)])
    transport, process = await spawn_stdio_transport(
        [sys.executable, "-m", "langbot_sdk.runtime", "--log-level", "ERROR"], env=env, cwd=str(REPO_ROOT)
    )
    connection = Connection(transport)
    await connection.start()
    try:
        # when the host lists the runners
        answer = await connection.call("list_agent_runners", {})
    finally:
        await connection.close()
        await asyncio.wait_for(process.wait(), timeout=5)

    # then runners of both directories are offered
    ids = {runner["id"] for runner in answer["runners"]}
    assert {QA_RUNNER_ID, "plugin:tester/env-plugin/main"} <= ids


async def test_ping_reports_health_and_active_runs(runtime, make_context):
    # given one slow run in flight
    stream = runtime.run_stream(make_context("qa:slow:30 x"))
    first = asyncio.ensure_future(stream.__anext__())

    # when the host pings (until the run request has reached the runtime)
    for _ in range(100):
        pong = await runtime.connection.call("ping", {})
        if pong["runs_active"]:
            break
        await asyncio.sleep(0.02)

    # then the runtime answers with its version and counts the run
    assert pong["pong"] is True
    assert pong["version"]
    assert pong["uptime_s"] >= 0
    assert pong["runs_active"] == 1
    first.cancel()
