"""The n8n-agent runner against a local fake n8n webhook, driven through the real plugin runtime by a
scripted host (tests/external_runners/host.py)."""

from __future__ import annotations

import pytest

from tests.external_runners.host import types_of
from tests.external_runners.runs import (
    RunnerUnderTest,
    assert_cancelled_and_closed,
    assert_config_invalid,
    assert_secret_nowhere,
    assert_timed_out_and_closed,
    deltas,
    failure,
    log_everything,
    reply,
)
from tests.fakes.n8n_server import fake_n8n

N8N = RunnerUnderTest("plugin:langbot/n8n-agent/default", lambda n8n: {"webhook-url": n8n.webhook_url})
run = N8N.run


async def test_a_streamed_answer_is_relayed_item_by_item_then_as_one_message(host, n8n):
    n8n.stream("Hel", "lo", {"rich": True})

    results = await run(host, n8n, "hello")

    assert deltas(results) == ["Hel", "lo", '{"rich": true}']
    assert reply(results) == 'Hello{"rich": true}'
    assert results[-1]["data"]["metadata"] == {"streamed": True}
    request = n8n.requests[0]
    assert request["chatInput"] == request["message"] == request["user_message_text"] == "hello"
    assert request["user_id"] == "person_u-42"
    assert request["msg_create_time"] == 1_700_000_000


async def test_without_a_streaming_surface_a_streamed_answer_is_one_message(host, n8n):
    n8n.stream("Hel", "lo")

    results = await run(host, n8n, "hello", streaming=False)

    assert types_of(results) == ["state.updated", "state.updated", "message.completed", "run.completed"]
    assert reply(results) == "Hello"


@pytest.mark.parametrize(
    ("answer", "config", "expected"),
    [
        ({"response": "plain hello"}, {}, "plain hello"),
        ({"answer": "keyed hello", "other": 1}, {"output-key": "answer"}, "keyed hello"),
        ([{"response": "first item"}], {}, "first item"),
        ({"result": {"a": 1}}, {}, '{"result": {"a": 1}}'),
    ],
)
async def test_a_plain_json_answer_replies_its_output_key(host, n8n, answer, config, expected):
    n8n.json(answer)

    results = await run(host, n8n, config=config)

    assert reply(results) == expected
    assert "message.delta" not in types_of(results)
    assert results[-1]["data"]["metadata"] == {"streamed": False}


async def test_a_plain_text_answer_is_the_reply(host, n8n):
    n8n.text("just text\n")

    assert reply(await run(host, n8n)) == "just text"


async def test_the_runner_owns_the_conversation_and_session_ids_across_turns(host, n8n):
    n8n.json({"response": "one"})
    n8n.json({"response": "two"})
    n8n.json({"response": "elsewhere"})

    first = await run(host, n8n, conversation_id="langbot-conv-1")
    second = await run(host, n8n, conversation_id="langbot-conv-1")
    await run(host, n8n, conversation_id="langbot-conv-2")

    one, two, other = n8n.requests
    stored = {r["data"]["key"]: r["data"]["value"] for r in first if r["type"] == "state.updated"}
    assert stored == {"external.conversation_id": one["conversation_id"], "external.session_id": "person_u-42"}
    assert one["conversation_id"] not in ("", "langbot-conv-1")
    assert (two["conversation_id"], two["session_id"], two["sessionId"]) == (
        one["conversation_id"], "person_u-42", "person_u-42",
    )  # fmt: skip
    assert "state.updated" not in types_of(second)
    assert other["conversation_id"] != one["conversation_id"]


@pytest.mark.parametrize(
    ("auth", "config"),
    [
        (("basic", "bot", "pa:ss"), {"auth-type": "basic", "basic-username": "bot", "basic-password": "pa:ss"}),
        (("jwt", "jwt-secret-value"), {"auth-type": "jwt", "jwt-secret": "jwt-secret-value"}),
        (
            ("header", "X-N8N-Key", "hdr-secret"),
            {"auth-type": "header", "header-name": "X-N8N-Key", "header-value": "hdr-secret"},
        ),
    ],
)
async def test_each_auth_type_is_accepted_by_the_webhook(host, auth, config):
    with fake_n8n(auth=auth) as n8n:
        n8n.json({"response": "authorized"})

        results = await run(host, n8n, config=config)

        assert reply(results) == "authorized"
        if auth[0] == "jwt":
            claims = n8n.jwt_claims[0]
            assert claims["sub"] == "n8n-webhook"
            assert claims["exp"] - claims["iat"] == 3600


@pytest.mark.parametrize(
    ("auth", "config", "refusal"),
    [
        (
            ("header", "X-N8N-Key", "right-value"),
            {"auth-type": "header", "header-name": "X-N8N-Key", "header-value": "wrong-value-123"},
            "Authorization data is wrong!",
        ),
        (
            ("basic", "bot", "right-value"),
            {"auth-type": "basic", "basic-username": "bot", "basic-password": "wrong-value-123"},
            "Authorization data is wrong!",
        ),
        (("jwt", "right-value"), {"auth-type": "jwt", "jwt-secret": "wrong-value-123"}, "invalid signature"),
    ],
)
async def test_wrong_credentials_fail_with_n8ns_plain_text_refusal_and_no_secret_shown(
    host, caplog, auth, config, refusal
):
    log_everything(caplog)
    with fake_n8n(auth=auth) as n8n:
        results = await run(host, n8n, config=config)

    data = failure(results)
    assert (data["code"], data["retryable"]) == ("n8n.http_error", False)
    assert data["message"] == f"n8n refused the request (403): {refusal}"
    assert data["details"] == {"status": 403}
    assert_secret_nowhere("wrong-value-123", results, caplog)


async def test_a_failed_workflow_fails_the_run_with_n8ns_message_and_is_not_retried(host, n8n):
    n8n.workflow_error()

    data = failure(await run(host, n8n))

    assert (data["code"], data["retryable"]) == ("n8n.error", False)
    assert "Error in workflow" in data["message"]


@pytest.mark.parametrize(
    ("status", "message", "code", "retryable"),
    [
        (500, "Workflow Webhook Error: Workflow could not be started!", "n8n.error", False),
        (500, "Internal Server Error", "n8n.unavailable", True),
    ],
)
async def test_n8n_error_answers_fail_the_run_with_its_message(host, n8n, status, message, code, retryable):
    n8n.fail(status, message)

    data = failure(await run(host, n8n))

    assert (data["code"], data["retryable"]) == (code, retryable)
    assert message in data["message"]
    assert "stacktrace" not in str(data)
    assert "webhook-request-handler" not in str(data)


@pytest.mark.parametrize(
    ("status", "message", "code", "retryable"),
    [
        (502, "Bad Gateway", "n8n.unavailable", True),
        (429, "Too many requests", "n8n.rate_limited", True),
    ],
)
async def test_a_proxys_error_in_front_of_n8n_fails_the_run_with_its_text(host, n8n, status, message, code, retryable):
    n8n.text(message, status=status)

    data = failure(await run(host, n8n))

    assert (data["code"], data["retryable"]) == (code, retryable)
    assert message in data["message"]


async def test_a_webhook_that_is_not_registered_is_a_clear_failure_without_n8ns_stack_trace(host, n8n):
    results = await run(host, n8n, config={"webhook-url": n8n.webhook_url + "-typo"})

    data = failure(results)
    assert (data["code"], data["retryable"]) == ("n8n.http_error", False)
    assert 'The requested webhook "POST langbot-chat-typo" is not registered.' in data["message"]
    assert "webhook-request-handler" not in str(data)


async def test_an_error_item_with_a_message_in_the_stream_fails_the_run_with_it(host, n8n):
    n8n.stream_lines([{"type": "begin"}, {"type": "error", "content": "Node 'AI Agent' failed"}])

    data = failure(await run(host, n8n))

    assert data["code"] == "n8n.error"
    assert "Node 'AI Agent' failed" in data["message"]


async def test_a_node_failing_in_a_streaming_webhook_is_named_in_the_failure(host, n8n):
    n8n.stream_failure("AI Agent")

    data = failure(await run(host, n8n))

    assert (data["code"], data["retryable"]) == ("n8n.error", False)
    assert "node 'AI Agent' failed" in data["message"]
    assert data["details"] == {"node": "AI Agent"}


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_streamed_respond_to_webhook_item_replies_its_output_key(host, n8n, streaming):
    n8n.respond_item({"response": "echo: hello", "extra": 1})

    results = await run(host, n8n, "hello", streaming=streaming)

    assert reply(results) == "echo: hello"
    assert deltas(results) == (["echo: hello"] if streaming else [])


async def test_a_streamed_item_of_json_text_without_the_output_key_is_relayed_as_it_came(host, n8n):
    n8n.respond_item({"other": "value"})

    assert reply(await run(host, n8n)) == '{"other": "value"}'


@pytest.mark.parametrize(
    ("answer", "config", "expected"),
    [
        ({"output": "chat hello"}, {}, "chat hello"),
        ([{"output": "chat hello"}], {"output-key": "response"}, "chat hello"),
        ({"response": "langbot hello", "output": "chat hello"}, {}, "langbot hello"),
        ({"output": "chat hello"}, {"output-key": "answer"}, '{"output": "chat hello"}'),
    ],
)
async def test_n8ns_chat_trigger_output_is_the_reply_with_the_default_output_key(host, n8n, answer, config, expected):
    n8n.json(answer)

    assert reply(await run(host, n8n, config=config)) == expected


async def test_a_chat_trigger_url_reads_output_first(host, n8n):
    n8n.json({"output": "from the agent", "response": "something else"})

    results = await run(host, n8n, "hello", config={"webhook-url": n8n.chat_url})

    assert reply(results) == "from the agent"
    assert n8n.requests[0]["chatInput"] == "hello"
    assert n8n.requests[0]["sessionId"] == "person_u-42"


async def test_a_webhook_that_stops_answering_times_out_retryably(host, n8n):
    n8n.stream("slow", " answer", hold_after=2)

    results = await run(host, n8n, config={"timeout": 0.5})

    await assert_timed_out_and_closed(results, "n8n", n8n)


@pytest.mark.parametrize("answer", [[{"type": "begin"}, {"type": "end"}], {"response": "  "}])
async def test_an_answer_without_output_fails_as_empty_output(host, n8n, answer):
    if isinstance(answer, list):
        n8n.stream_lines(answer)
    else:
        n8n.json(answer)

    data = failure(await run(host, n8n))

    assert data["code"] == "n8n.empty_output"


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"webhook-url": ""}, "webhook-url"),
        ({"webhook-url": "n8n.local/webhook"}, "webhook-url"),
        ({"auth-type": "oauth"}, "auth-type"),
        ({"auth-type": "basic"}, "basic-username"),
        ({"auth-type": "jwt"}, "jwt-secret"),
        ({"auth-type": "jwt", "jwt-secret": "s3cret", "jwt-algorithm": "RS256"}, "jwt-algorithm"),
        ({"auth-type": "header", "header-value": "v"}, "header-name"),
        ({"auth-type": "header", "header-name": "X-Key"}, "header-value"),
        ({"timeout": "120s"}, "timeout"),
    ],
)
async def test_missing_or_bad_config_fails_naming_the_field_without_calling_n8n(host, n8n, config, field):
    results = await run(host, n8n, config=config)

    assert_config_invalid(results, "n8n", field, n8n)


async def test_cancelling_a_run_closes_the_webhook_stream(host, n8n):
    n8n.stream("first", " second", hold_after=2)

    results = await N8N.cancelled_after_first_delta(host, n8n)

    await assert_cancelled_and_closed(results, n8n)


async def test_an_input_with_only_a_file_is_refused_since_webhooks_are_sent_text(host, n8n):
    picture = host.add_artifact("cat.png", "image/png", b"\x89PNG")

    results = await run(host, n8n, "", contents=[{"type": "image", "artifact_id": picture}])

    data = failure(results)
    assert data["code"] == "n8n.empty_input"
    assert "state.updated" not in types_of(results)
    assert n8n.requests == []


async def test_the_text_of_an_input_with_files_is_sent_without_them(host, n8n):
    n8n.json({"response": "got it"})
    picture = host.add_artifact("cat.png", "image/png", b"\x89PNG")

    results = await run(host, n8n, "look", contents=[{"type": "image", "artifact_id": picture}])

    assert reply(results) == "got it"
    assert n8n.requests[0]["chatInput"] == "look"


async def test_usage_in_a_plain_answer_is_normalized(host, n8n):
    n8n.json({"response": "counted", "usage": {"prompt_tokens": 11, "completion_tokens": 4}})

    results = await run(host, n8n)

    assert reply(results) == "counted"
    assert results[-1]["data"]["usage"] == {
        "prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15, "source": "n8n",
    }  # fmt: skip
