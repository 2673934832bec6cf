"""The n8n-agent runner against a real n8n (tests/peers/conftest.py starts it) running the workflows of
tests/peers/n8n_workflows.py, through the real plugin runtime and the scripted host: what the fake of
tests/fakes/n8n_server.py claims, checked against the real thing."""

from __future__ import annotations

import pytest

from tests.external_runners.host import types_of
from tests.external_runners.runs import RunnerUnderTest, failure, log_everything, reply
from tests.peers.processes import N8nPeer

N8N = RunnerUnderTest("plugin:langbot/n8n-agent/default", lambda peer: {"webhook-url": peer.webhook("langbot-chat")})
run = N8N.run
# The first test waits for n8n to start (minutes on a busy machine).
pytestmark = pytest.mark.timeout(600)


async def test_a_json_answer_replies_its_output_key_and_the_session_is_kept_across_turns(host, n8n: N8nPeer):
    first = await run(host, n8n, "turn one", conversation_id="langbot-conv-1")
    second = await run(host, n8n, "turn two", conversation_id="langbot-conv-1")

    assert reply(first) == "echo: turn one (session person_u-42)"
    assert reply(second) == "echo: turn two (session person_u-42)"
    assert first[-1]["data"]["metadata"] == {"streamed": False}
    assert "state.updated" in types_of(first)
    assert "state.updated" not in types_of(second)


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_streamed_respond_to_webhook_item_replies_its_output_key(host, n8n: N8nPeer, streaming):
    results = await run(host, n8n, "hello", streaming=streaming, config={"webhook-url": n8n.webhook("langbot-stream")})

    assert reply(results) == "echo: hello"


async def test_a_failed_workflow_is_a_readable_non_retryable_failure(host, n8n: N8nPeer):
    data = failure(await run(host, n8n, config={"webhook-url": n8n.webhook("langbot-fail")}))

    assert (data["code"], data["retryable"]) == ("n8n.error", False)


async def test_a_node_failing_mid_stream_is_named_in_the_failure(host, n8n: N8nPeer):
    data = failure(await run(host, n8n, config={"webhook-url": n8n.webhook("langbot-fail-stream")}))

    assert (data["code"], data["retryable"]) == ("n8n.error", False)
    assert data["details"]["node"] == "Refuse"


async def test_header_auth_is_accepted_with_the_right_value_and_refused_without_showing_the_wrong_one(
    host, n8n: N8nPeer, caplog
):
    log_everything(caplog)
    config = {"webhook-url": n8n.webhook("langbot-auth"), "auth-type": "header", "header-name": n8n.header_name}

    accepted = await run(host, n8n, "knock", config={**config, "header-value": n8n.header_value})
    refused = await run(host, n8n, "knock", config={**config, "header-value": "wrong-peers-header-value"})

    assert reply(accepted).startswith("echo: knock")
    data = failure(refused)
    assert (data["code"], data["retryable"]) == ("n8n.http_error", False)
    assert "wrong-peers-header-value" not in str(data)
    assert "wrong-peers-header-value" not in caplog.text


async def test_a_path_no_workflow_listens_on_is_a_clear_failure(host, n8n: N8nPeer):
    data = failure(await run(host, n8n, config={"webhook-url": n8n.webhook("no-such-workflow")}))

    assert (data["code"], data["retryable"]) == ("n8n.http_error", False)
    assert "not registered" in data["message"]
