"""Real MCP servers nobody here wrote, called by the local-agent through a real worker: `mcp-server-time` and
`mcp-server-git` (pinned in requirements-dev.txt, console scripts of this virtualenv) for what a tool answers,
and the suite's probe server (tests/fakes/mcp_probe_server.py), whose `slow_count` records each execution in
a file and then waits, for what happens while a call is running. The model is the scripted
OpenAI-compatible fake; what a tool answered is read in the next request the model gets.

- a call's result reaches the model (time in UTC; status and log of a repository made here);
- a tool's own error reaches the model as an error it can read (an unknown time zone; a path outside the
  repository the operator confined the git server to);
- a server killed during a call: the model reads that the outcome is unknown, and the call ran once;
- a server that does not answer: the server's timeout ends the call with an error the model reads;
- a run cancelled during a call ends cancelled without waiting for the call, which ran once.

Each server is added as an operator adds one (an operator key over the REST API, then a refresh, which a
worker runs), with its absolute path on `LANGBOT_MCP_STDIO_COMMANDS` in this process and in the worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from bindings.models import AgentBinding, Workspace
from bindings.services import api_key_create
from runners.lifecycle.services import run_cancel_request
from runners.models import Run, RunEvent
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import AgentBindingFactory, ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, chunk, fake_openai
from tests.processes import WorkerProcess, post_message, wait_status, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RUNNER_ID = "plugin:langbot/local-agent/default"
# The servers' console scripts sit beside this interpreter (requirements-dev.txt installs them).
BIN = Path(sys.executable).parent
TIME_SERVER = str(BIN / "mcp-server-time")
GIT_SERVER = str(BIN / "mcp-server-git")
PROBE_SERVER = str(Path(__file__).resolve().parents[1] / "fakes" / "mcp_probe_server.py")
# What an operator allows: the two servers by path, and the interpreter the probe server runs under.
STDIO_COMMANDS = [TIME_SERVER, GIT_SERVER, sys.executable]
USAGE = {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}


@pytest.fixture(scope="module")
def peers_worker(start_worker) -> Iterator[WorkerProcess]:
    """A worker allowed to start the real servers, on a queue of this module's own: the session's shared
    worker keeps the suite's default allowlist (the interpreter only)."""
    from langbot_host.celery import app

    for command in STDIO_COMMANDS:
        assert Path(command).is_file(), f"{command} is missing: install requirements-dev.txt"
    queue = f"langbot-test-mcp-peers-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    worker = start_worker(LANGBOT_MCP_STDIO_COMMANDS=",".join(STDIO_COMMANDS), CELERY_TASK_DEFAULT_QUEUE=queue)
    app.conf.task_default_queue = queue
    yield worker
    app.conf.task_default_queue = previous
    worker.stop()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@dataclass
class Operator:
    """An operator's REST client on a fresh workspace, and the model the workspace's agent talks to."""

    workspace: Workspace
    client: APIClient
    fake: FakeOpenAI

    def server_add(self, server_id: str, command: str, args: list[str], *, timeout_seconds: int = 20) -> list[str]:
        """Add a stdio server and refresh it (a worker connects); the names of the tools it lists."""
        body = {"server_id": server_id, "name": server_id, "transport": "stdio", "command": command,
                "args": args, "timeout_seconds": timeout_seconds}  # fmt: skip
        created = self.client.post("/api/v1/mcp-servers", body, format="json")
        assert created.status_code == 201, created.json()
        refreshed = self.client.post(f"/api/v1/mcp-servers/{server_id}/refresh")
        assert (refreshed.status_code, refreshed.json()["status"]) == (200, "ok"), refreshed.json()
        tools = self.client.get("/api/v1/tools").json()
        return sorted(tool["tool_name"] for tool in tools if tool["source"] == f"mcp:{server_id}")

    def agent(self, *tools: str) -> AgentBinding:
        """The local-agent bound to the workspace, allowed `tools`, answering with the fake model."""
        provider = ModelProviderFactory.create(workspace=self.workspace, base_url=self.fake.base_url, max_retries=0)
        ModelFactory.create(
            workspace=self.workspace, provider=provider, model_id="m1", name="gpt-fake", supports_tools=True
        )
        return AgentBindingFactory.create(
            workspace=self.workspace,
            runner_id=RUNNER_ID,
            runner_config={"model": "m1", "prompt": [{"role": "system", "content": "Use the tools."}]},
            resource_policy={"allowed_model_ids": ["m1"], "allowed_tool_names": list(tools)},
        )


@pytest.fixture
def operator(peers_worker, qa_report, settings, fake) -> Operator:
    assert RUNNER_ID in [m.id for m in qa_report.runners], "the runtime did not load plugins/local-agent"
    runner_descriptors_sync(report=qa_report)
    settings.LANGBOT_MCP_STDIO_COMMANDS = STDIO_COMMANDS  # the REST API checks the command on save
    workspace = WorkspaceFactory.create()
    _, key = api_key_create(workspace=workspace, is_operator=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return Operator(workspace, client, fake)


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    first = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps(arguments)}}]}),
        chunk({}, finish_reason="tool_calls"),
        chunk(usage=USAGE),
    ]


def answer(text: str) -> list[dict[str, Any]]:
    return [chunk({"role": "assistant", "content": text}), chunk({}, finish_reason="stop"), chunk(usage=USAGE)]


def tool_message(fake: FakeOpenAI, call_id: str) -> dict[str, Any]:
    """What the model read for the call: the tool message of the request after the one that asked for it."""
    assert len(fake.requests) == 2, fake.requests
    message: dict[str, Any] = fake.requests[1]["messages"][-1]
    assert (message["role"], message["tool_call_id"]) == ("tool", call_id), message
    return message


def tool_events(run: Run) -> list[tuple[str, dict[str, Any]]]:
    events = RunEvent.objects.filter(run=run, type__startswith="tool.call.").order_by("seq")
    return [(event.type, event.data) for event in events]


def executions(count: Path) -> list[int]:
    """The pids of the server processes that ran `slow_count`, one line per execution."""
    return [int(line) for line in count.read_text().split()] if count.exists() else []


def wait_executed(count: Path) -> int:
    deadline = time.monotonic() + 20
    while not executions(count):
        assert time.monotonic() < deadline, "the tool call never reached the server"
        time.sleep(0.05)
    return executions(count)[0]


def git_repository(path: Path) -> str:
    """A repository with one commit; its head's id."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}  # fmt: skip
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    (path / "notes.txt").write_text("kettle returns: 45 days\n")
    subprocess.run(["git", "-C", str(path), "add", "notes.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "Write down the returns policy"], check=True, env=env)
    (path / "draft.txt").write_text("not committed\n")
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True, env=env, capture_output=True)
    return head.stdout.decode().strip()


# --- results and tool errors from the real servers ----------------------------------------------------


def test_the_time_servers_answer_for_utc_reaches_the_model(operator):
    assert operator.server_add("time", TIME_SERVER, ["--local-timezone", "UTC"]) == ["convert_time", "get_current_time"]
    binding = operator.agent("get_current_time")
    operator.fake.stream(tool_call("call_time_1", "get_current_time", {"timezone": "UTC"}))
    operator.fake.stream(answer("It is morning in UTC."))

    run = wait_terminal(post_message(binding, "What time is it in UTC?", conversation_id="time-1"), timeout=30)

    assert (run.status, run.output) == (Run.Status.COMPLETED, "It is morning in UTC."), run.error
    offered = [tool["function"]["name"] for tool in operator.fake.requests[0]["tools"]]
    assert offered == ["get_current_time"]
    told = json.loads(tool_message(operator.fake, "call_time_1")["content"])
    assert told["timezone"] == "UTC"
    assert told["datetime"].endswith("+00:00")
    (started, completed) = tool_events(run)
    assert (started[0], started[1]["parameters"]) == ("tool.call.started", {"timezone": "UTC"})
    assert (completed[0], completed[1].get("error")) == ("tool.call.completed", None)


def test_an_unknown_time_zone_reaches_the_model_as_the_tools_error(operator):
    operator.server_add("time", TIME_SERVER, ["--local-timezone", "UTC"])
    binding = operator.agent("get_current_time")
    operator.fake.stream(tool_call("call_time_2", "get_current_time", {"timezone": "Mars/Olympus_Mons"}))
    operator.fake.stream(answer("There is no such time zone."))

    run = wait_terminal(post_message(binding, "What time is it on Mars?", conversation_id="time-2"), timeout=30)

    assert run.status == Run.Status.COMPLETED, run.error  # a tool's error is the model's to read, not the run's
    content = tool_message(operator.fake, "call_time_2")["content"]
    assert content.startswith("Error: ")
    assert "Invalid timezone" in content
    assert "Mars/Olympus_Mons" in content
    (_, completed) = tool_events(run)
    assert "Mars/Olympus_Mons" in completed[1]["error"]


def test_the_git_servers_status_and_log_of_a_repository_reach_the_model(operator, tmp_path):
    repository = tmp_path / "shop"
    head = git_repository(repository)
    tools = operator.server_add("git", GIT_SERVER, ["--repository", str(repository)])
    assert {"git_status", "git_log", "git_commit"} <= set(tools)
    binding = operator.agent("git_status", "git_log")
    operator.fake.stream(tool_call("call_status", "git_status", {"repo_path": str(repository)}))
    operator.fake.stream(tool_call("call_log", "git_log", {"repo_path": str(repository), "max_count": 5}))
    operator.fake.stream(answer("One commit; draft.txt is not tracked."))

    run = wait_terminal(post_message(binding, "What changed in the shop repo?", conversation_id="git-1"), timeout=30)

    assert (run.status, run.output) == (Run.Status.COMPLETED, "One commit; draft.txt is not tracked."), run.error
    status_request, log_request = operator.fake.requests[1], operator.fake.requests[2]
    status = status_request["messages"][-1]
    assert (status["role"], status["tool_call_id"]) == ("tool", "call_status")
    assert "draft.txt" in status["content"]
    assert "Untracked" in status["content"]
    log = log_request["messages"][-1]
    assert (log["role"], log["tool_call_id"]) == ("tool", "call_log")
    assert head in log["content"]
    assert "Write down the returns policy" in log["content"]
    assert [(t, d["tool_name"]) for t, d in tool_events(run)] == [
        ("tool.call.started", "git_status"), ("tool.call.completed", "git_status"),
        ("tool.call.started", "git_log"), ("tool.call.completed", "git_log"),
    ]  # fmt: skip


def test_a_path_outside_the_operators_repository_reaches_the_model_as_the_tools_error(operator, tmp_path):
    repository = tmp_path / "shop"
    git_repository(repository)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    operator.server_add("git", GIT_SERVER, ["--repository", str(repository)])
    binding = operator.agent("git_status")
    operator.fake.stream(tool_call("call_status", "git_status", {"repo_path": str(elsewhere)}))
    operator.fake.stream(answer("I may only look at the shop repository."))

    run = wait_terminal(post_message(binding, "Status of elsewhere?", conversation_id="git-2"), timeout=30)

    assert run.status == Run.Status.COMPLETED, run.error
    content = tool_message(operator.fake, "call_status")["content"]
    assert content.startswith("Error: ")
    assert "outside the allowed repository" in content
    assert str(elsewhere) in content


# --- a server that dies, hangs, or whose run is cancelled during the call --------------------------------


def test_a_server_killed_during_a_call_runs_the_call_once_and_the_model_reads_the_outcome_is_unknown(
    operator, tmp_path
):
    count = tmp_path / "executions"
    operator.server_add("probe", sys.executable, [PROBE_SERVER, "--count", str(count), "--delay", "60"])
    binding = operator.agent("slow_count")
    operator.fake.stream(tool_call("call_count", "slow_count", {}))
    operator.fake.stream(answer("The count may or may not have happened."))
    run = post_message(binding, "Count once.", conversation_id="crash-1")

    os.kill(wait_executed(count), signal.SIGKILL)
    run = wait_terminal(run, timeout=30)

    assert run.status == Run.Status.COMPLETED, run.error
    content = tool_message(operator.fake, "call_count")["content"]
    assert content.startswith("Error: runtime_error: ")
    assert "may or may not have run" in content
    assert "not sent again" in content
    assert len(executions(count)) == 1
    assert [t for t, _ in tool_events(run)] == ["tool.call.started", "tool.call.completed"]


def test_a_server_that_does_not_answer_ends_the_call_at_its_timeout_with_an_error_the_model_reads(operator, tmp_path):
    count = tmp_path / "executions"
    # The timeout bounds the refresh's connecting too (the call then uses the session the refresh left):
    # long enough for a Python server to start on a busy machine.
    args = [PROBE_SERVER, "--count", str(count), "--delay", "60"]
    operator.server_add("probe", sys.executable, args, timeout_seconds=10)
    binding = operator.agent("slow_count")
    operator.fake.stream(tool_call("call_count", "slow_count", {}))
    operator.fake.stream(answer("The counter did not answer."))

    run = wait_terminal(post_message(binding, "Count once.", conversation_id="hang-1"), timeout=30)

    assert (run.status, run.output) == (Run.Status.COMPLETED, "The counter did not answer."), run.error
    content = tool_message(operator.fake, "call_count")["content"]
    assert content.startswith("Error: deadline_exceeded: ")
    assert "did not answer the call of 'slow_count' within 10 s" in content
    assert len(executions(count)) == 1


def test_cancelling_a_run_during_a_tool_call_ends_it_cancelled_and_the_call_ran_once(operator, tmp_path):
    count = tmp_path / "executions"
    operator.server_add("probe", sys.executable, [PROBE_SERVER, "--count", str(count), "--delay", "60"])
    binding = operator.agent("slow_count")
    operator.fake.stream(tool_call("call_count", "slow_count", {}))
    run = post_message(binding, "Count once.", conversation_id="cancel-1")
    wait_executed(count)
    wait_status(run, Run.Status.RUNNING)

    run_cancel_request(run=run, reason="user pressed stop")

    # The call would answer in 60 s; the run ends long before, and the model is not asked again.
    run = wait_terminal(run, timeout=15)
    assert (run.status, run.status_reason) == (Run.Status.CANCELLED, "user pressed stop"), run.error
    assert len(operator.fake.requests) == 1
    assert len(executions(count)) == 1
