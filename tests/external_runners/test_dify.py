"""The dify-agent runner against a local fake Dify service API, driven through the real plugin runtime by a
scripted host (tests/external_runners/host.py)."""

from __future__ import annotations

import time

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
    picture_and_report,
    uploaded_whole,
)
from tests.fakes.dify_server import API_KEY, agent_events, chat_events, workflow_events

DIFY = RunnerUnderTest(
    "plugin:langbot/dify-agent/default",
    lambda dify: {"base-url": dify.base_url, "api-key": API_KEY, "app-type": "chat"},
)
run = DIFY.run


async def test_a_chat_answer_streams_as_deltas_then_one_message_and_usage(host, dify):
    dify.stream(chat_events("Hel", "lo", " there"))

    results = await run(host, dify, "hello")

    assert types_of(results) == ["message.delta"] * 3 + ["state.updated", "message.completed", "run.completed"]
    assert [r["data"]["chunk"]["content"] for r in results[:3]] == ["Hel", "lo", " there"]
    assert completed_text(results) == "Hello there"
    assert results[-1]["data"]["usage"] == {
        "prompt_tokens": 1033,
        "completion_tokens": 135,
        "total_tokens": 1168,
        "source": "dify",
        "total_price": "0.0013030",
        "currency": "USD",
        "latency": 1.381760165997548,
    }
    request = dify.requests[0]
    assert dify.paths == ["/v1/chat-messages"]
    assert request["query"] == "hello"
    assert request["response_mode"] == "streaming"
    assert request["user"] == "person_u-42"
    # the inputs old LangBot sent a chat app (its pipeline variables), and those it added for workflows
    assert request["inputs"] == {
        "user_message_text": "hello",
        "session_id": "person_u-42",
        "conversation_id": "",
        "msg_create_time": 1_700_000_000,
        "langbot_user_message_text": "hello",
        "langbot_session_id": "person_u-42",
        "langbot_conversation_id": "langbot-conv-1",
        "langbot_msg_create_time": 1_700_000_000,
    }


async def test_without_a_streaming_surface_the_answer_is_one_message_with_the_tool_calls(host, dify):
    dify.stream(agent_events(tool="current_time", tool_input={"tz": "UTC"}, observation="12:00"))

    results = await run(host, dify, "what time is it", streaming=False, config={"app-type": "agent"})

    assert types_of(results) == [
        "tool.call.started", "tool.call.completed", "state.updated", "message.completed", "run.completed",
    ]  # fmt: skip
    assert completed_text(results) == "It is noon."
    assert dify.requests[0]["response_mode"] == "streaming"  # agent apps answer only streamed


async def test_only_the_conversation_id_dify_issued_is_kept_and_sent_on_the_next_turn(host, dify):
    dify.stream(chat_events("one", conversation_id="dify-conv-A"))
    dify.stream(chat_events("two", conversation_id="dify-conv-A"))
    dify.stream(chat_events("other", conversation_id="dify-conv-B"))

    first = await run(host, dify, "turn one", conversation_id="langbot-conv-1")
    second = await run(host, dify, "turn two", conversation_id="langbot-conv-1")
    elsewhere = await run(host, dify, "other chat", conversation_id="langbot-conv-2")

    # the first turn starts a Dify conversation (never LangBot's id) and keeps the id Dify issued
    assert dify.requests[0]["conversation_id"] == ""
    update = next(r for r in first if r["type"] == "state.updated")["data"]
    assert update == {"scope": "conversation", "key": "external.conversation_id", "value": "dify-conv-A"}
    # the second turn of the same conversation continues it; a known id is not written again
    assert dify.requests[1]["conversation_id"] == "dify-conv-A"
    assert dify.requests[1]["inputs"]["conversation_id"] == "dify-conv-A"  # as old LangBot's variable held it
    assert "state.updated" not in types_of(second)
    # another LangBot conversation gets its own Dify conversation
    assert dify.requests[2]["conversation_id"] == ""
    assert host.state[("langbot-conv-2", "conversation", "external.conversation_id")] == "dify-conv-B"
    assert completed_text(elsewhere) == "other"


async def test_a_stored_conversation_dify_no_longer_knows_is_replaced_by_a_new_one(host, dify):
    host.state[("langbot-conv-1", "conversation", "external.conversation_id")] = "forgotten-id"
    dify.stream(chat_events("fresh start", conversation_id="dify-conv-new"))

    results = await run(host, dify)

    assert [r["conversation_id"] for r in dify.requests] == ["forgotten-id", ""]
    assert completed_text(results) == "fresh start"
    assert host.state[("langbot-conv-1", "conversation", "external.conversation_id")] == "dify-conv-new"


async def test_an_agent_apps_tool_use_becomes_tool_call_results(host, dify):
    dify.stream(agent_events(tool="current_time", tool_input={"tz": "UTC"}, observation="12:00"))

    results = await run(host, dify, "what time is it", config={"app-type": "agent"})

    started = next(r for r in results if r["type"] == "tool.call.started")["data"]
    completed_call = next(r for r in results if r["type"] == "tool.call.completed")["data"]
    assert started == {
        "tool_call_id": "thought-1:current_time",
        "tool_name": "current_time",
        "parameters": {"tz": "UTC"},
    }
    assert completed_call["tool_call_id"] == "thought-1:current_time"
    assert completed_call["result"] == "12:00"
    assert types_of(results).index("tool.call.completed") < types_of(results).index("message.delta")
    assert completed_text(results) == "It is noon."


async def test_a_workflow_app_runs_the_workflow_and_replies_its_summary(host, dify):
    dify.stream(workflow_events({"summary": "Workflow says hi"}, chunks=("Workflow ", "says hi"), total_tokens=42))

    results = await run(host, dify, "go", config={"app-type": "workflow"})

    assert dify.paths == ["/v1/workflows/run"]
    request = dify.requests[0]
    assert request["inputs"]["langbot_user_message_text"] == request["inputs"]["user_message_text"] == "go"
    assert request["inputs"]["conversation_id"] == request["inputs"]["langbot_conversation_id"] == "langbot-conv-1"
    assert request["response_mode"] == "streaming"
    assert "conversation_id" not in request
    assert types_of(results) == [
        "tool.call.started", "message.delta", "message.delta", "tool.call.completed", "message.completed",
        "run.completed",
    ]  # fmt: skip
    assert completed_text(results) == "Workflow says hi"
    assert results[-1]["data"]["usage"] == {
        "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 42, "source": "dify",
    }  # fmt: skip


async def test_a_failed_workflow_fails_the_run_with_difys_error(host, dify):
    dify.stream(workflow_events({}, status="failed", error="Variable #query# is required"))

    data = failure(await run(host, dify, config={"app-type": "workflow"}))

    assert data["code"] == "dify.error"
    assert "Variable #query# is required" in data["message"]


async def test_an_error_event_in_the_stream_fails_the_run_with_its_message(host, dify):
    events = chat_events("partial")
    error = {"event": "error", "task_id": "task-1", "message_id": "msg-1", "status": 400,
             "code": "completion_request_error", "message": "Model quota exceeded"}  # fmt: skip
    dify.stream([events[0], error])

    data = failure(await run(host, dify))

    assert data["code"] == "dify.error"
    assert data["retryable"] is False
    assert "Model quota exceeded" in data["message"]
    assert data["details"]["platform_code"] == "completion_request_error"


@pytest.mark.parametrize(
    ("status", "dify_code", "message", "code", "retryable"),
    [
        (400, "invalid_param", "Query is required", "dify.http_error", False),
        (400, "app_unavailable", "App unavailable, please check your app configurations.", "dify.http_error", False),
        (429, "too_many_requests", "Too many requests", "dify.rate_limited", True),
        (500, "internal_server_error", "Internal server error", "dify.unavailable", True),
    ],
)
async def test_difys_error_answers_fail_the_run_with_its_message(
    host, dify, status, dify_code, message, code, retryable
):
    dify.fail(status, dify_code, message)

    data = failure(await run(host, dify))

    assert (data["code"], data["retryable"]) == (code, retryable)
    assert message in data["message"]
    assert data["details"] == {"status": status, "platform_code": dify_code}


async def test_a_wrong_api_key_is_refused_and_the_key_is_not_shown(host, dify, caplog):
    log_everything(caplog)
    results = await run(host, dify, config={"api-key": "app-wrong-key-123"})

    data = failure(results)
    assert data["code"] == "dify.http_error"
    assert "Access token is invalid" in data["message"]
    assert_secret_nowhere("app-wrong-key-123", results, caplog)


async def test_a_dify_that_stops_answering_times_out_retryably_and_is_told_to_stop(host, dify):
    dify.stream(chat_events("slow", " answer", task_id="task-slow"), hold_after=1)

    results = await run(host, dify, config={"timeout": 0.5})

    await assert_timed_out_and_closed(results, "dify", dify)
    assert dify.stops == [("/v1/chat-messages/task-slow/stop", {"user": "person_u-42"})]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"api-key": ""}, "api-key"),
        ({"base-url": None}, "base-url"),
        ({"base-url": "not a url"}, "base-url"),
        ({"app-type": "completion"}, "app-type"),
        ({"timeout": 0}, "timeout"),
        ({"thinking-convert": "hide"}, "thinking-convert"),
    ],
)
async def test_missing_or_bad_config_fails_naming_the_field_without_calling_dify(host, dify, fields, field):
    results = await run(host, dify, config=fields)

    assert_config_invalid(results, "dify", field, dify)


async def test_cancelling_a_run_stops_the_dify_task_and_closes_the_stream(host, dify):
    dify.stream(chat_events("first", " second", task_id="task-cancel"), hold_after=1)

    results = await DIFY.cancelled_after_first_delta(host, dify)

    assert results[0]["data"]["chunk"]["content"] == "first"
    await assert_cancelled_and_closed(results, dify)
    assert dify.stops == [("/v1/chat-messages/task-cancel/stop", {"user": "person_u-42"})]


async def test_cancelling_a_workflow_run_stops_the_workflow_task_and_closes_the_stream(host, dify):
    dify.stream(workflow_events({"summary": "never"}, chunks=("first", " second"), task_id="task-wf"), hold_after=3)
    workflow = RunnerUnderTest(DIFY.runner_id, lambda fake: {**DIFY.base_config(fake), "app-type": "workflow"})

    results = await workflow.cancelled_after_first_delta(host, dify)

    assert [r["data"]["chunk"]["content"] for r in results if r["type"] == "message.delta"] == ["first"]
    await assert_cancelled_and_closed(results, dify)
    assert dify.stops == [("/v1/workflows/tasks/task-wf/stop", {"user": "person_u-42"})]


async def test_input_images_and_files_are_uploaded_to_dify_and_sent_with_the_query(host, dify):
    dify.stream(chat_events("A cat and a report."))

    results = await run(host, dify, "", **picture_and_report(host))

    assert completed_text(results) == "A cat and a report."
    uploads = uploaded_whole(dify.uploads)
    assert {upload.user for upload in dify.uploads} == {"person_u-42"}
    request = dify.requests[0]
    assert sorted(request["files"], key=lambda f: f["type"]) == [
        {"type": "document", "transfer_method": "local_file", "upload_file_id": uploads["report.pdf"].file_id},
        {"type": "image", "transfer_method": "local_file", "upload_file_id": uploads["cat.png"].file_id},
    ]
    # no text: the configured base prompt is the query, as in LangBot
    assert request["query"].startswith("When the file content is readable")


async def test_an_input_file_the_host_does_not_have_fails_the_run_before_calling_dify(host, dify):
    data = failure(await run(host, dify, attachments=[{"artifact_id": "art-missing"}]))

    assert data["code"] == "dify.input_unavailable"
    assert dify.requests == []


@pytest.mark.parametrize("fields", [{"thinking-convert": "remove"}, {"remove-think": True}])
async def test_thinking_is_removed_from_deltas_and_the_message_when_configured(host, dify, fields):
    dify.stream(chat_events("<thi", "nk>let me", " think</th", "ink>The answer", " is 4."))

    results = await run(host, dify, config=fields)

    deltas = "".join(r["data"]["chunk"]["content"] for r in results if r["type"] == "message.delta")
    assert "think" not in deltas
    assert completed_text(results) == "The answer is 4."


async def test_thinking_is_kept_by_default(host, dify):
    dify.stream(chat_events("<think>hmm</think>", "Four."))

    assert completed_text(await run(host, dify)) == "<think>hmm</think>Four."


async def test_retriever_resources_become_citations_of_the_run(host, dify):
    resource = {"position": 1, "dataset_id": "ds-1", "dataset_name": "Handbook", "document_id": "doc-1",
                "document_name": "vacation.md", "segment_id": "seg-1", "score": 0.92,
                "content": "Employees get 25 days of vacation."}  # fmt: skip
    dify.stream(chat_events("25 days.", retriever_resources=[resource]))

    results = await run(host, dify)

    assert results[-1]["type"] == "run.completed"
    assert results[-1]["data"]["metadata"]["citations"] == [resource]


async def test_an_answer_without_text_fails_as_empty_output_instead_of_an_empty_message(host, dify):
    dify.stream(chat_events())

    assert_empty_output(await run(host, dify), "dify")


async def test_an_image_dify_sends_back_is_part_of_the_message(host, dify):
    events = chat_events("Here is your chart.")
    image = {"event": "message_file", "id": "file-9", "type": "image", "belongs_to": "assistant",
             "url": "/files/tools/chart.png?timestamp=1&sign=abc", "conversation_id": "dify-conv-1"}  # fmt: skip
    dify.stream([events[0], image, events[1]])

    content = completed_text(await run(host, dify))

    site = dify.base_url.removesuffix("/v1")
    assert content == [
        {"type": "text", "text": "Here is your chart."},
        {"type": "image_url", "image_url": f"{site}/files/tools/chart.png?timestamp=1&sign=abc"},
    ]


async def test_the_runs_deadline_still_ends_a_dify_call_that_would_outlast_it(host, dify):
    dify.stream(chat_events("slow", " answer", task_id="task-deadline"), hold_after=1)

    results = await run(host, dify, deadline_at=time.time() + 1.0)

    assert results[-1]["type"] == "run.failed"
    assert results[-1]["data"]["code"] == "runner.timeout"
    assert dify.stops == [("/v1/chat-messages/task-deadline/stop", {"user": "person_u-42"})]
