"""The langflow-agent runner against a real Langflow (tests/peers/conftest.py starts it) running the echo flow
of tests/peers/langflow_flow.py, through the real plugin runtime and the scripted host: what the fake of
tests/fakes/langflow_server.py claims, checked against the real thing."""

from __future__ import annotations

import pytest

from tests.external_runners.host import types_of
from tests.external_runners.runs import RunnerUnderTest, failure, log_everything, reply
from tests.peers.processes import LangflowPeer

LANGFLOW = RunnerUnderTest(
    "plugin:langbot/langflow-agent/default",
    lambda peer: {"base-url": peer.base_url, "api-key": peer.api_key, "flow-id": peer.flow_id},
)
run = LANGFLOW.run
# The first test waits for Langflow to start (minutes on a busy machine).
pytestmark = pytest.mark.timeout(600)
SESSION_KEY = ("langbot-conv-1", "conversation", "external.session_id")


@pytest.mark.parametrize("streaming", [True, False])
async def test_the_flow_answers_streamed_or_not(host, langflow: LangflowPeer, streaming):
    results = await run(host, langflow, "hello", streaming=streaming)

    assert reply(results) == "echo: hello"
    session = host.state[SESSION_KEY]
    assert results[-1]["data"]["metadata"] == {"langflow_session_id": session}


async def test_the_flow_is_found_by_its_endpoint_name_too(host, langflow: LangflowPeer):
    results = await run(host, langflow, "by name", config={"flow-id": langflow.endpoint_name})

    assert reply(results) == "echo: by name"


async def test_the_turns_of_a_conversation_share_one_langflow_session(host, langflow: LangflowPeer):
    first = await run(host, langflow, "turn one", conversation_id="langbot-conv-1")
    second = await run(host, langflow, "turn two", conversation_id="langbot-conv-1")
    await run(host, langflow, "other chat", conversation_id="langbot-conv-2")

    session = host.state[SESSION_KEY]
    assert "state.updated" in types_of(first)
    assert "state.updated" not in types_of(second)
    stored = [(m["sender"], m["text"]) for m in langflow.session_messages(session)]
    assert stored == [
        ("User", "turn one"), ("Machine", "echo: turn one"), ("User", "turn two"), ("Machine", "echo: turn two"),
    ]  # fmt: skip
    assert host.state[("langbot-conv-2", "conversation", "external.session_id")] != session


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_failing_component_is_the_same_readable_non_retryable_failure_streamed_or_not(
    host, langflow: LangflowPeer, streaming
):
    data = failure(await run(host, langflow, "fail please", streaming=streaming))

    assert (data["code"], data["retryable"]) == ("langflow.error", False)
    assert data["message"].startswith("Langflow reported an error: ")
    assert "echo refused: fail please" in data["message"]
    assert "traceback" not in data["message"]  # Langflow's exception body, read; not its raw JSON


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_failed_first_turn_keeps_its_session_for_the_next_turn(host, langflow: LangflowPeer, streaming):
    first = await run(host, langflow, "fail first", conversation_id="langbot-conv-1", streaming=streaming)
    second = await run(host, langflow, "then hello", conversation_id="langbot-conv-1", streaming=streaming)

    assert failure(first)["code"] == "langflow.error"
    assert reply(second) == "echo: then hello"
    texts = [m["text"] for m in langflow.session_messages(host.state[SESSION_KEY])]
    assert texts[0] == "fail first"  # Langflow kept the failed turn's message in the session
    assert texts[-2:] == ["then hello", "echo: then hello"]


async def test_an_unknown_flow_and_a_wrong_key_are_refused_without_showing_the_key(
    host, langflow: LangflowPeer, caplog
):
    log_everything(caplog)

    unknown = failure(await run(host, langflow, config={"flow-id": "no-such-flow"}))
    wrong_key = failure(await run(host, langflow, config={"api-key": "sk-wrong-key-for-peers"}))

    assert (unknown["code"], unknown["retryable"]) == ("langflow.http_error", False)
    assert "no-such-flow" in unknown["message"]
    assert (wrong_key["code"], wrong_key["retryable"]) == ("langflow.http_error", False)
    assert "sk-wrong-key-for-peers" not in str(wrong_key)
    assert "sk-wrong-key-for-peers" not in caplog.text
    assert langflow.api_key not in caplog.text
