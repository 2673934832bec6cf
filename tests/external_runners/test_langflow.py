"""The langflow-agent runner against a local fake Langflow, driven through the real plugin runtime by a
scripted host (tests/external_runners/host.py)."""

from __future__ import annotations

import pytest

from tests.external_runners.host import types_of
from tests.external_runners.runs import (
    RunnerUnderTest,
    assert_cancelled_and_closed,
    assert_config_invalid,
    assert_empty_output,
    assert_secret_nowhere,
    assert_timed_out_and_closed,
    completed_text,
    failure,
    log_everything,
)
from tests.fakes.langflow_server import API_KEY, FLOW_ID

LANGFLOW = RunnerUnderTest(
    "plugin:langbot/langflow-agent/default",
    lambda langflow: {"base-url": langflow.base_url, "api-key": API_KEY, "flow-id": FLOW_ID},
)
run = LANGFLOW.run
SESSION_KEY = ("langbot-conv-1", "conversation", "external.session_id")


async def test_a_streamed_flow_sends_its_tokens_as_deltas_then_one_message(host, langflow):
    usage = {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
    langflow.reply("Hello there", tokens=("Hel", "lo", " there"), usage=usage)

    results = await run(host, langflow, "hello")

    assert types_of(results) == ["state.updated"] + ["message.delta"] * 3 + ["message.completed", "run.completed"]
    assert [r["data"]["chunk"]["content"] for r in results[1:4]] == ["Hel", "lo", " there"]
    assert completed_text(results) == "Hello there"
    assert results[-1]["data"]["usage"] == {
        "prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, "source": "langflow",
    }  # fmt: skip
    assert langflow.params == [{"stream": "true"}]
    request = langflow.requests[0]
    assert request["input_value"] == "hello"
    assert (request["input_type"], request["output_type"]) == ("chat", "chat")
    assert request["session_id"].startswith("langbot-")
    assert "tweaks" not in request


async def test_without_a_streaming_surface_the_flow_runs_whole_and_replies_once(host, langflow):
    langflow.reply("All at once", usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})

    results = await run(host, langflow, "hello", streaming=False)

    assert types_of(results) == ["state.updated", "message.completed", "run.completed"]
    assert completed_text(results) == "All at once"
    assert langflow.params == [{"stream": "false"}]
    assert results[-1]["data"]["usage"] == {
        "prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "source": "langflow",
    }  # fmt: skip


async def test_the_session_id_is_kept_for_the_conversation_and_sent_on_the_next_turn(host, langflow):
    langflow.reply("one")
    langflow.reply("two")
    langflow.reply("other")

    first = await run(host, langflow, "turn one", conversation_id="langbot-conv-1")
    second = await run(host, langflow, "turn two", conversation_id="langbot-conv-1")
    await run(host, langflow, "other chat", conversation_id="langbot-conv-2")

    session = langflow.requests[0]["session_id"]
    assert session != "langbot-conv-1"
    update = next(r for r in first if r["type"] == "state.updated")["data"]
    assert update == {"scope": "conversation", "key": "external.session_id", "value": session}
    assert langflow.requests[1]["session_id"] == session
    assert "state.updated" not in types_of(second)
    assert langflow.requests[2]["session_id"] not in (session, "langbot-conv-2")
    assert second[-1]["data"]["metadata"] == {"langflow_session_id": session}


@pytest.mark.parametrize("tweaks", ['{"OpenAIModel-1": {"temperature": 0.2}}', {"OpenAIModel-1": {"temperature": 0.2}}])
async def test_tweaks_given_as_langbots_json_text_or_an_object_are_sent_as_an_object(host, langflow, tweaks):
    langflow.reply("tweaked")

    await run(host, langflow, config={"tweaks": tweaks, "input-type": "text", "output-type": "any"})

    request = langflow.requests[0]
    assert request["tweaks"] == {"OpenAIModel-1": {"temperature": 0.2}}
    assert (request["input_type"], request["output_type"]) == ("text", "any")


async def test_a_flow_whose_reply_comes_only_as_messages_still_answers(host, langflow):
    langflow.stream(
        [
            {"event": "add_message", "data": {"sender": "User", "text": "hi", "session_id": "s-1"}},
            {"event": "add_message", "data": {"sender": "Machine", "text": "From the message", "session_id": "s-1"}},
        ]
    )

    results = await run(host, langflow)

    assert "message.delta" not in types_of(results)
    assert completed_text(results) == "From the message"
    assert host.state[SESSION_KEY] == "s-1"


async def test_an_error_event_fails_the_run_with_langflows_message(host, langflow):
    langflow.stream(
        [
            {"event": "token", "data": {"chunk": "par"}},
            {"event": "error", "data": {"error": "Error building Component OpenAI: invalid model"}},
        ]
    )

    data = failure(await run(host, langflow))

    assert data["code"] == "langflow.error"
    assert "invalid model" in data["message"]


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_failing_component_is_the_same_readable_non_retryable_failure_streamed_or_not(
    host, langflow, streaming
):
    message = "Error running graph: Error building Component OpenAI: invalid model 'gpt-x'"
    langflow.component_failure(message)

    data = failure(await run(host, langflow, streaming=streaming))

    assert (data["code"], data["retryable"]) == ("langflow.error", False)
    assert data["message"] == f"Langflow reported an error: {message}"


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_failed_first_turn_keeps_its_session_for_the_next_turn(host, langflow, streaming):
    langflow.component_failure("Error building Component OpenAI: rate limited by the provider")
    langflow.reply("second turn")

    first = await run(host, langflow, "turn one", conversation_id="langbot-conv-1", streaming=streaming)
    await run(host, langflow, "turn two", conversation_id="langbot-conv-1", streaming=streaming)

    assert failure(first)["code"] == "langflow.error"
    one, two = langflow.requests
    assert two["session_id"] == one["session_id"]
    assert host.state[SESSION_KEY] == one["session_id"]


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [(400, "langflow.http_error", False), (422, "langflow.http_error", False), (500, "langflow.unavailable", True)],
)
async def test_langflows_error_answers_fail_the_run_with_its_detail(host, langflow, status, code, retryable):
    langflow.fail(status, f"flow failed with {status}")

    data = failure(await run(host, langflow, streaming=status != 422))

    assert (data["code"], data["retryable"]) == (code, retryable)
    assert f"flow failed with {status}" in data["message"]
    assert data["details"] == {"status": status}


async def test_an_unknown_flow_and_a_wrong_key_are_refused_without_showing_the_key(host, langflow, caplog):
    log_everything(caplog)
    unknown = failure(await run(host, langflow, config={"flow-id": "missing-flow"}))
    results = await run(host, langflow, config={"api-key": "sk-wrong-key-123"})

    assert unknown["code"] == "langflow.http_error"
    assert "Flow identifier missing-flow not found" in unknown["message"]
    assert failure(results)["details"] == {"status": 403}
    assert_secret_nowhere("sk-wrong-key-123", results, caplog)


async def test_a_langflow_that_stops_answering_times_out_retryably_and_the_stream_is_closed(host, langflow):
    langflow.reply("slow answer", tokens=("slow", " answer"), hold_after=3)

    results = await run(host, langflow, config={"timeout": 0.5})

    await assert_timed_out_and_closed(results, "langflow", langflow)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"api-key": ""}, "api-key"),
        ({"flow-id": None}, "flow-id"),
        ({"base-url": "localhost:7860"}, "base-url"),
        ({"tweaks": "{not json"}, "tweaks"),
        ({"tweaks": "[1, 2]"}, "tweaks"),
        ({"timeout": "soon"}, "timeout"),
    ],
)
async def test_missing_or_bad_config_fails_naming_the_field_without_calling_langflow(host, langflow, fields, field):
    results = await run(host, langflow, config=fields)

    assert_config_invalid(results, "langflow", field, langflow)


async def test_cancelling_a_run_closes_the_langflow_stream(host, langflow):
    langflow.reply("first second", tokens=("first", " second"), hold_after=4)

    results = await LANGFLOW.cancelled_after_first_delta(host, langflow)

    assert results[1]["data"]["chunk"]["content"] == "first"
    await assert_cancelled_and_closed(results, langflow)


async def test_a_flow_with_no_output_fails_as_empty_output_instead_of_an_empty_message(host, langflow):
    langflow.reply("")

    assert_empty_output(await run(host, langflow, streaming=False), "langflow")


async def test_an_input_with_only_a_file_is_refused_since_flows_take_text(host, langflow):
    picture = host.add_artifact("cat.png", "image/png", b"\x89PNG")

    data = failure(await run(host, langflow, "", contents=[{"type": "image", "artifact_id": picture}]))

    assert data["code"] == "langflow.empty_input"
    assert langflow.requests == []
