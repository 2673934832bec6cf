"""The harness-agent runner through the real plugin runtime (in-process), against a fake Claude Code-style
CLI (`tests/fakes/fake_harness_cli.py`) that reads the projected files, calls the run's MCP host bridge and
streams stream-json."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.external_runners.harness_host import (
    RUNNER_ID,
    HarnessHost,
    harness_config,
    start_harness_host,
    stop_harness_host,
    stream_json,
)
from tests.external_runners.host import types_of

SKILLS = [
    {"name": "release-notes", "description": "Write release notes.", "instructions": "Group changes by area."},
]


@pytest.fixture
async def harness() -> AsyncIterator[HarnessHost]:
    host, served = await start_harness_host()
    host.transcript = [
        {"role": "user", "content": "how do we deploy?"},
        {"role": "assistant", "content": "with make deploy"},
    ]
    yield host
    await stop_harness_host(host, served)


def report_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    directory = working_directory_of(results)
    return json.loads((directory / "fake-harness-report.json").read_text())


def working_directory_of(results: list[dict[str, Any]]) -> Path:
    for result in results:
        if result["type"] == "state.updated" and result["data"]["key"] == "external.working_directory":
            return Path(result["data"]["value"])
    raise AssertionError(f"no working directory in {types_of(results)}")


def failure(results: list[dict[str, Any]]) -> dict[str, Any]:
    assert results[-1]["type"] == "run.failed", results[-1]
    return results[-1]["data"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie nobody reaped yet is dead too
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


async def wait_for(path: Path, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = await asyncio.to_thread(lambda: path.read_text() if path.exists() else "")
        if text:
            return dict(json.loads(text))
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


async def test_a_turn_projects_the_context_and_answers_through_the_bridge(harness, tmp_path):
    ctx = harness.context(RUNNER_ID, "summarize the deploy thread", config=harness_config(tmp_path, skills=SKILLS))
    results = await harness.run(RUNNER_ID, ctx)

    # the CLI's stream became the run's results
    assert types_of(results) == [
        "state.updated",  # working directory
        "state.updated",  # session id from system/init
        "message.delta",
        "tool.call.started",
        "tool.call.completed",
        "message.delta",
        "message.delta",
        "message.delta",
        "message.completed",
        "run.completed",
    ], results
    deltas = "".join(r["data"]["chunk"]["content"] for r in results if r["type"] == "message.delta")
    expected = "Let me look at the conversation.\n\nYou said: summarize the deploy thread"
    assert deltas == expected
    assert results[-2]["data"]["message"]["content"] == expected
    started, completed = results[3]["data"], results[4]["data"]
    assert (started["tool_name"], started["parameters"]) == ("mcp__langbot__langbot_history_page", {"limit": 10})
    assert completed["tool_call_id"] == started["tool_call_id"]
    assert "make deploy" in completed["result"]
    usage = results[-1]["data"]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (420, 42, 462)
    assert (usage["total_price"], usage["currency"], usage["num_turns"]) == (0.0123, "USD", 2)

    report = report_of(results)
    directory = working_directory_of(results)
    assert directory.parent == tmp_path
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert report["prompt"] == "summarize the deploy thread"
    # agent-context.json: the schema, the event, actor, conversation, input, resources and context APIs
    context = report["context"]
    assert context["schema"] == "langbot.agent_runner.external_harness_context.v1"
    assert context["run_id"] == ctx["run_id"]
    assert context["event"]["event_id"] == ctx["event"]["event_id"]
    assert context["actor"] == {"actor_type": "user", "actor_id": "u-42", "actor_name": "Ada", "metadata": {}}
    assert context["conversation"]["conversation_id"] == "langbot-conv-1"
    assert context["input"]["text"] == "summarize the deploy thread"
    assert [kb["kb_id"] for kb in context["resources"]["knowledge_bases"]] == ["kb-docs"]
    assert [t["tool_name"] for t in context["resources"]["tools"]] == ["weather"]
    assert context["resources"]["skills"] == [{"name": "release-notes", "description": "Write release notes."}]
    assert {"history_page", "history_search", "event_get", "state"} <= set(context["context"]["available_context_apis"])
    assert context["state"]["external.working_directory"] == str(directory)
    assert context["mcp"]["bridge"]["server"] == "langbot"
    assert "config" not in context  # runner config (secrets) is not projected
    # the readable projection
    assert "summarize the deploy thread" in report["markdown"]
    assert "`kb-docs`" in report["markdown"]
    assert "Ada" in report["markdown"]
    # the skill
    assert report["skills"]["release-notes"].startswith('---\nname: release-notes\ndescription: "Write release notes."')
    assert "Group changes by area." in report["skills"]["release-notes"]
    # the MCP config: passed with --mcp-config, owner-only, naming the bridge with its bearer token
    assert report["argv"][-2:] == ["--mcp-config", str(directory / ".mcp.json")]
    assert report["mcp_config_mode"] == "0o600"
    server = report["mcp_config"]["mcpServers"]["langbot"]
    assert server["type"] == "http"
    assert server["url"].startswith("http://127.0.0.1:")
    assert server["headers"]["Authorization"].startswith("Bearer ")
    assert report["env"]["LANGBOT_RUN_ID"] == ctx["run_id"]

    # the bridge answered through the host's proxy handlers, authorized by the host
    bridge = report["bridge"]
    assert bridge["tools"] == [
        "langbot_artifact_metadata",
        "langbot_artifact_read",
        "langbot_call_tool",
        "langbot_current_event",
        "langbot_event_get",
        "langbot_history_page",
        "langbot_history_search",
        "langbot_knowledge_retrieve",
        "langbot_list_tools",
        "langbot_state_get",
        "langbot_state_list",
    ]
    # attachments are readable, as the harness's LANGBOT_CONTEXT.md promises; others' are not
    assert bridge["artifact_read"]["text"] == "release notes draft: faster deploys"
    assert bridge["artifact_read"]["eof"] is True
    assert "not_found: no artifact 'someone-elses'" in bridge["artifact_denied"]["error"]
    assert bridge["current_event"]["event"]["event_id"] == ctx["event"]["event_id"]
    assert bridge["current_event"]["input"]["text"] == "summarize the deploy thread"
    assert bridge["current_event"]["record"]["event_id"] == ctx["event"]["event_id"]
    assert [i["content"] for i in bridge["history_page"]["items"]] == ["how do we deploy?", "with make deploy"]
    assert [h["item"]["content"] for h in bridge["history_search"]["items"]] == [
        "how do we deploy?",
        "with make deploy",
    ]
    assert bridge["knowledge"]["entries"][0]["content"].startswith("Deploy with `make deploy`")
    assert (
        "unauthorized: knowledge base 'kb-secret'" in bridge["knowledge_denied"]["error"]
    )  # refused by the SDK/host, not served
    assert bridge["tool"] == {"result": {"city": "Paris", "forecast": "sunny"}, "is_error": False}
    assert bridge["without_token_status"] == 401
    host_actions = [action for action, _ in harness.calls]
    for action in ("event_get", "history_page", "history_search", "retrieve_knowledge_base", "call_tool"):
        assert action in host_actions
    for action, data in harness.calls:
        if action != "state_get":
            assert data["run_id"] == ctx["run_id"]
            assert data["caller_plugin_identity"] == "langbot/harness-agent"
    assert results[-1]["data"]["metadata"]["bridge_calls"][0] == "langbot_current_event"


async def test_without_a_streaming_surface_the_reply_is_one_message_with_the_tool_calls(harness, tmp_path):
    ctx = harness.context(RUNNER_ID, "summarize the deploy thread", config=harness_config(tmp_path))
    ctx["delivery"]["supports_streaming"] = False

    results = await harness.run(RUNNER_ID, ctx)

    assert types_of(results) == [
        "state.updated", "state.updated", "tool.call.started", "tool.call.completed", "message.completed",
        "run.completed",
    ]  # fmt: skip
    expected = "Let me look at the conversation.\n\nYou said: summarize the deploy thread"
    assert results[-2]["data"]["message"]["content"] == expected


async def test_the_bridge_token_stops_working_when_the_run_ends(harness, tmp_path):
    results = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=harness_config(tmp_path)))
    assert results[-1]["type"] == "run.completed"
    bridge = report_of(results)["bridge"]
    headers = {"Authorization": bridge["authorization"], "Accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    # the server is gone with the run: the token reaches nothing any more
    async with httpx2.AsyncClient(timeout=5) as http:
        with pytest.raises(httpx2.ConnectError):
            await http.post(bridge["url"], json=body, headers=headers)
    # and the host no longer knows the run's proxy credential
    assert harness.run_tokens == {}


async def test_two_turns_resume_the_cli_session_in_the_same_directory(harness, tmp_path):
    config = harness_config(tmp_path)
    first = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "first", config=config))
    report_one = report_of(first)
    session = report_one["context"]["state"]["external.session_id"]
    assert session is None
    assert report_one["resume"] is None
    new_session = next(r["data"]["value"] for r in first if r["data"].get("key") == "external.session_id")

    second = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "second", config=config))
    assert second[-1]["type"] == "run.completed", second[-1]
    directory = working_directory_of(first)
    report_two = json.loads((directory / "fake-harness-report.json").read_text())
    assert report_two["prompt"] == "second"
    assert report_two["resume"] == new_session
    assert report_two["argv"][-2:] == ["--resume", new_session]
    assert report_two["context"]["state"] == {
        "external.session_id": new_session,
        "external.working_directory": str(directory),
    }
    # nothing new to store: the same directory and session
    assert not [r for r in second if r["type"] == "state.updated"]
    assert harness.state[("langbot-conv-1", "conversation", "external.session_id")] == new_session
    assert list(tmp_path.iterdir()) == [directory]


async def test_a_missing_base_directory_fails_the_run(harness, tmp_path):
    config = harness_config(tmp_path / "nowhere")
    data = failure(await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=config)))
    assert data["code"] == "harness.working_directory_missing"
    assert data["details"]["field"] == "working-directory"
    assert data["retryable"] is False


async def test_a_vanished_working_directory_fails_once_then_a_new_session_starts(harness, tmp_path):
    config = harness_config(tmp_path)
    first = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "one", config=config))
    shutil.rmtree(working_directory_of(first))

    second = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "two", config=config))
    data = failure(second)
    assert data["code"] == "harness.working_directory_missing"
    assert "next message starts a new session" in data["message"]

    third = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "three", config=config))
    assert third[-1]["type"] == "run.completed"
    assert report_of(third)["resume"] is None


async def test_a_missing_cli_executable_fails_the_run(harness, tmp_path):
    config = harness_config(tmp_path, command="/nonexistent/claude -p")
    data = failure(await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=config)))
    assert data["code"] == "harness.cli_not_found"
    assert "/nonexistent/claude" in data["message"]


async def test_a_timeout_kills_the_whole_process_group(harness, tmp_path):
    config = harness_config(tmp_path, timeout=3, env={"FAKE_HARNESS_MODE": "hang"})
    results = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=config))
    data = failure(results)
    assert (data["code"], data["retryable"]) == ("harness.timeout", True)
    pids = json.loads((working_directory_of(results) / "fake-harness-pids.json").read_text())
    await asyncio.sleep(0.2)
    assert not alive(pids["cli"])
    assert not alive(pids["child"])


async def test_a_non_zero_exit_fails_with_the_stderr_tail_and_no_secret(harness, tmp_path):
    env = {"FAKE_HARNESS_MODE": "crash", "FAKE_HARNESS_SECRET": "sk-very-secret-value"}
    config = harness_config(tmp_path, env=env)
    data = failure(await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=config)))
    assert data["code"] == "harness.exit_error"
    assert data["details"]["exit_code"] == 3
    assert "fatal: could not reach the model" in data["message"]
    assert "sk-very-secret-value" not in json.dumps(data)


async def test_empty_output_fails_the_run(harness, tmp_path):
    config = harness_config(tmp_path, env={"FAKE_HARNESS_MODE": "silent"})
    data = failure(await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=config)))
    assert data["code"] == "harness.empty_output"


async def test_an_error_result_fails_the_run_with_the_cli_message(harness, tmp_path):
    config = harness_config(tmp_path, env={"FAKE_HARNESS_MODE": "error-result"})
    data = failure(await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=config)))
    assert data["code"] == "harness.error"
    assert "model overloaded" in data["message"]


async def test_an_invalid_config_names_the_field(harness, tmp_path):
    bad_skill = [{"name": "../escape", "description": "x", "instructions": "y"}]
    for config, field in (
        (harness_config(tmp_path, skills=bad_skill), "skills"),
        (harness_config(tmp_path, args="not json"), "args"),
        (harness_config(tmp_path, **{"working-directory": "relative/dir"}), "working-directory"),
    ):
        data = failure(await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "hi", config=config)))
        assert (data["code"], data["details"]["field"]) == ("harness.config_invalid", field)


async def test_the_prompt_can_be_an_argument_and_the_mcp_config_the_project_file(harness, tmp_path):
    config = harness_config(tmp_path, **{"prompt-mode": "argument", "mcp-config-arg": ""})
    results = await harness.run(RUNNER_ID, harness.context(RUNNER_ID, "as an argument", config=config))
    assert results[-1]["type"] == "run.completed", results[-1]
    report = report_of(results)
    assert report["argv"][-1] == "as an argument"
    assert "--mcp-config" not in report["argv"]
    assert report["bridge"]["history_page"]["items"]  # found the bridge through .mcp.json


async def test_cancelling_the_run_kills_the_process_group_and_stops_the_bridge(harness, tmp_path):
    config = harness_config(tmp_path, env={"FAKE_HARNESS_MODE": "hang"})
    ctx = harness.context(RUNNER_ID, "hi", config=config)
    results: list[dict[str, Any]] = []

    async def consume() -> None:
        async for result in harness.run_stream(RUNNER_ID, ctx):
            results.append(result)

    task = asyncio.create_task(consume())
    deadline = time.monotonic() + 20
    while not any(r["data"].get("key") == "external.working_directory" for r in results):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    pids = await wait_for(working_directory_of(results) / "fake-harness-pids.json")
    mcp = json.loads((working_directory_of(results) / ".mcp.json").read_text())["mcpServers"]["langbot"]
    assert alive(pids["cli"])
    assert alive(pids["child"])

    assert (await harness.cancel(ctx["run_id"]))["cancelled"] is True
    await asyncio.wait_for(task, 15)

    assert failure(results)["code"] == "cancelled"
    await asyncio.sleep(0.2)
    assert not alive(pids["cli"])
    assert not alive(pids["child"])
    async with httpx2.AsyncClient(timeout=5) as http:
        with pytest.raises(httpx2.ConnectError):
            await http.post(mcp["url"], json={}, headers=mcp["headers"])


# --- the stream-json translation on its own ----------------------------------------------------------


def test_stream_json_lines_skip_noise_and_map_tool_errors():
    translator = stream_json.StreamJsonTranslator("run-1")
    assert translator.feed("not json") == []
    assert translator.feed("[1, 2]") == []
    assert translator.feed(json.dumps({"type": "system", "subtype": "init", "session_id": "s-1"})) == []
    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    started = translator.feed(json.dumps({"type": "assistant", "message": {"content": [use]}}))
    failed = {"type": "tool_result", "tool_use_id": "t1", "content": "permission denied", "is_error": True}
    completed = translator.feed(json.dumps({"type": "user", "message": {"content": [failed]}}))
    assert [r.type for r in started + completed] == ["tool.call.started", "tool.call.completed"]
    assert completed[0].data["error"] == "permission denied"
    translator.feed(json.dumps({"type": "result", "subtype": "success", "result": "done", "session_id": "s-1"}))
    assert (translator.session_id, translator.final_text()) == ("s-1", "done")
    assert stream_json.harness_usage({"usage": {"input_tokens": 3, "output_tokens": 4}}, source="harness") == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
        "source": "harness",
        "cache_read_tokens": 0,
        "cache_creation_tokens": 0,
    }


async def test_the_run_deadline_kills_the_process_group(harness, tmp_path):
    config = harness_config(tmp_path, env={"FAKE_HARNESS_MODE": "hang"})
    ctx = harness.context(RUNNER_ID, "hi", config=config, deadline_at=time.time() + 3)
    results = await harness.run(RUNNER_ID, ctx)
    assert failure(results)["code"] == "runner.timeout"
    pids = json.loads((working_directory_of(results) / "fake-harness-pids.json").read_text())
    await asyncio.sleep(0.2)
    assert not alive(pids["cli"])
    assert not alive(pids["child"])
