"""The harness-agent runner through the real worker and plugin runtime: the fake CLI reaches the real
host's handlers through the run's MCP bridge, and the second message of a conversation resumes the first
one's CLI session in the same working directory, through the host's conversation state."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from runners.models import Run
from runtimes.descriptors import runner_descriptors_sync
from tests.external_runners.harness_host import RUNNER_ID, harness_config
from tests.factories import AgentBindingFactory, WorkspaceFactory
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_two_turns_through_the_worker_use_the_bridge_and_resume_the_session(worker, qa_report, tmp_path):
    runner_descriptors_sync(report=qa_report)
    binding = AgentBindingFactory.create(
        workspace=WorkspaceFactory.create(),
        runner_id=RUNNER_ID,
        runner_config=harness_config(tmp_path),
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
    )

    first = wait_terminal(post_message(binding, "hello harness", conversation_id="conv-harness"), timeout=90)
    assert first.status == Run.Status.COMPLETED, first.error
    assert first.output.endswith("You said: hello harness")
    assert first.usage["total_tokens"] == 462

    [directory] = list(tmp_path.iterdir())
    report = json.loads((directory / "fake-harness-report.json").read_text())
    assert report["context"]["schema"] == "langbot.agent_runner.external_harness_context.v1"
    assert report["context"]["run_id"] == str(first.run_id)
    bridge = report["bridge"]
    # answered by the real host: the transcript holds the message that started the run
    assert "hello harness" in [item["content"] for item in bridge["history_page"]["items"]]
    assert bridge["current_event"]["input"]["text"] == "hello harness"
    assert bridge["without_token_status"] == 401
    # the run is over: its bridge, and with it the token in the MCP config, reaches nothing any more
    with pytest.raises(httpx2.ConnectError):
        httpx2.post(bridge["url"], json={}, headers={"Authorization": bridge["authorization"]}, timeout=5)
    session = report["context"]["state"]["external.session_id"]
    assert session is None

    second = wait_terminal(post_message(binding, "and again", conversation_id="conv-harness"), timeout=90)
    assert second.status == Run.Status.COMPLETED, second.error
    assert list(tmp_path.iterdir()) == [directory]
    report_two = json.loads((Path(directory) / "fake-harness-report.json").read_text())
    assert report_two["prompt"] == "and again"
    assert report_two["resume"]
    assert report_two["resume"] == report_two["context"]["state"]["external.session_id"]
    assert report_two["argv"][-2:] == ["--resume", report_two["resume"]]
