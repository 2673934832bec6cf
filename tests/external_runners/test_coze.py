"""The coze-agent runner against a local fake Coze API, driven through the real plugin runtime by a scripted
host (tests/external_runners/host.py)."""

from __future__ import annotations

import json

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
    deltas,
    failure,
    log_everything,
    picture_and_report,
    uploaded_whole,
)
from tests.fakes.coze_server import BOT_ID, TOKEN, chat_events, failed_chat

COZE = RunnerUnderTest(
    "plugin:langbot/coze-agent/default", lambda coze: {"api-key": TOKEN, "bot-id": BOT_ID, "api-base": coze.base_url}
)
run = COZE.run


async def test_a_bots_answer_streams_as_deltas_then_one_message_and_usage(host, coze):
    coze.stream(chat_events("Hel", "lo", " there", follow_ups=("Tell me more",)))

    results = await run(host, coze, "hello")

    assert types_of(results) == ["message.delta"] * 3 + ["state.updated", "message.completed", "run.completed"]
    assert [r["data"]["chunk"]["content"] for r in results[:3]] == ["Hel", "lo", " there"]
    assert completed_text(results) == "Hello there"
    done = results[-1]["data"]
    assert done["usage"] == {"prompt_tokens": 1126, "completion_tokens": 35, "total_tokens": 1161, "source": "coze"}
    assert done["metadata"] == {
        "coze_conversation_id": "coze-conv-1", "coze_chat_id": "chat-1", "follow_up": ["Tell me more"],
    }  # fmt: skip
    request = coze.requests[0]
    assert request == {
        "bot_id": BOT_ID,
        "user_id": "person_u-42",
        "stream": True,
        "auto_save_history": True,
        "additional_messages": [{"role": "user", "content": "hello", "content_type": "text"}],
    }
    assert coze.params == [{}]


async def test_without_a_streaming_surface_the_answer_is_one_message(host, coze):
    coze.stream(chat_events("Hel", "lo", " there"))

    results = await run(host, coze, "hello", streaming=False)

    assert types_of(results) == ["state.updated", "message.completed", "run.completed"]
    assert completed_text(results) == "Hello there"
    assert results[-1]["data"]["usage"]["total_tokens"] == 1161


async def test_only_the_conversation_id_coze_issued_is_kept_and_sent_on_the_next_turn(host, coze):
    coze.stream(chat_events("one", conversation_id="coze-conv-A"))
    coze.stream(chat_events("two", conversation_id="coze-conv-A"))
    coze.stream(chat_events("other", conversation_id="coze-conv-B"))

    first = await run(host, coze, "turn one", conversation_id="langbot-conv-1")
    second = await run(host, coze, "turn two", conversation_id="langbot-conv-1")
    elsewhere = await run(host, coze, "other chat", conversation_id="langbot-conv-2")

    # the first turn starts a Coze conversation (LangBot's id is never sent) and keeps the id Coze issued
    update = next(r for r in first if r["type"] == "state.updated")["data"]
    assert update == {"scope": "conversation", "key": "external.conversation_id", "value": "coze-conv-A"}
    # the second turn of the same conversation continues it; a known id is not written again
    assert coze.params[:2] == [{}, {"conversation_id": "coze-conv-A"}]
    assert "state.updated" not in types_of(second)
    assert completed_text(second) == "two"
    # another LangBot conversation gets its own Coze conversation
    assert coze.params[2] == {}
    assert host.state[("langbot-conv-2", "conversation", "external.conversation_id")] == "coze-conv-B"
    assert completed_text(elsewhere) == "other"


async def test_a_stored_conversation_coze_no_longer_knows_is_replaced_by_a_new_one(host, coze):
    host.state[("langbot-conv-1", "conversation", "external.conversation_id")] = "forgotten-id"
    coze.stream(chat_events("fresh start", conversation_id="coze-conv-new"))

    results = await run(host, coze)

    assert coze.params == [{"conversation_id": "forgotten-id"}, {}]
    assert completed_text(results) == "fresh start"
    assert host.state[("langbot-conv-1", "conversation", "external.conversation_id")] == "coze-conv-new"


async def test_reasoning_is_shown_inside_think_tags_before_the_answer(host, coze):
    coze.stream(chat_events("Four.", reasoning=("2 plus 2", " is 4")))

    results = await run(host, coze, "2+2?")

    assert completed_text(results) == "<think>\n2 plus 2 is 4\n</think>\nFour."
    assert "".join(deltas(results)) == completed_text(results)


async def test_a_plugin_call_of_the_bot_becomes_tool_call_results(host, coze):
    coze.stream(chat_events("It is sunny.", tool=("weather", {"city": "Hangzhou"}, '{"sky": "sunny"}')))

    results = await run(host, coze, "weather?")

    started = next(r for r in results if r["type"] == "tool.call.started")["data"]
    completed_call = next(r for r in results if r["type"] == "tool.call.completed")["data"]
    assert started == {"tool_call_id": "msg-call", "tool_name": "weather", "parameters": {"city": "Hangzhou"}}
    assert (completed_call["tool_call_id"], completed_call["result"]) == ("msg-call", '{"sky": "sunny"}')
    assert types_of(results).index("tool.call.completed") < types_of(results).index("message.delta")
    assert completed_text(results) == "It is sunny."


async def test_a_failed_chat_fails_the_run_with_cozes_error(host, coze):
    coze.stream(failed_chat(4011, "The bot's balance is insufficient"))

    data = failure(await run(host, coze))

    assert data["code"] == "coze.error"
    assert data["retryable"] is False
    assert "balance is insufficient" in data["message"]
    assert data["details"]["platform_code"] == "4011"


async def test_an_error_event_in_the_stream_fails_the_run(host, coze):
    events = chat_events("partial")
    coze.stream([*events[:3], ("error", {"code": 5000, "msg": "internal error in workflow"})])

    data = failure(await run(host, coze))

    assert data["code"] == "coze.error"
    assert "internal error in workflow" in data["message"]


async def test_a_request_coze_refuses_with_a_json_body_fails_the_run_with_its_message(host, coze):
    coze.refuse(4200, "Requested resource bot_id=7350000000000000001 does not exist")

    data = failure(await run(host, coze))

    assert data["code"] == "coze.http_error"
    assert data["retryable"] is False
    assert "bot_id=7350000000000000001 does not exist" in data["message"]
    assert data["details"] == {"platform_code": "4200"}


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [(400, "coze.http_error", False), (429, "coze.rate_limited", True), (502, "coze.unavailable", True)],
)
async def test_cozes_error_answers_fail_the_run_with_its_message(host, coze, status, code, retryable):
    coze.fail(status, 4000 + status, f"status {status} from Coze")

    data = failure(await run(host, coze))

    assert (data["code"], data["retryable"]) == (code, retryable)
    assert f"status {status} from Coze" in data["message"]
    assert data["details"] == {"status": status, "platform_code": str(4000 + status)}


async def test_a_wrong_token_is_refused_and_the_token_is_not_shown(host, coze, caplog):
    log_everything(caplog)
    results = await run(host, coze, config={"api-key": "pat_wrong_token_123"})

    data = failure(results)
    assert data["code"] == "coze.http_error"
    assert "authentication is invalid" in data["message"]
    assert_secret_nowhere("pat_wrong_token_123", results, caplog)


async def test_a_coze_that_stops_answering_times_out_retryably_and_the_chat_is_cancelled(host, coze):
    coze.stream(chat_events("slow", " answer", chat_id="chat-slow"), hold_after=3)

    results = await run(host, coze, config={"timeout": 0.5})

    await assert_timed_out_and_closed(results, "coze", coze)
    assert coze.cancels == [{"chat_id": "chat-slow", "conversation_id": "coze-conv-1"}]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"api-key": ""}, "api-key"),
        ({"bot-id": None}, "bot-id"),
        ({"api-base": "ftp://coze"}, "api-base"),
        ({"timeout": -1}, "timeout"),
        ({"auto-save-history": "yes"}, "auto-save-history"),
    ],
)
async def test_missing_or_bad_config_fails_naming_the_field_without_calling_coze(host, coze, fields, field):
    results = await run(host, coze, config=fields)

    assert_config_invalid(results, "coze", field, coze)


async def test_cancelling_a_run_cancels_the_coze_chat_and_closes_the_stream(host, coze):
    coze.stream(chat_events("first", " second", chat_id="chat-cancel"), hold_after=3)

    results = await COZE.cancelled_after_first_delta(host, coze)

    assert results[0]["data"]["chunk"]["content"] == "first"
    await assert_cancelled_and_closed(results, coze)
    assert coze.cancels == [{"chat_id": "chat-cancel", "conversation_id": "coze-conv-1"}]


async def test_input_images_and_files_are_uploaded_and_sent_as_an_object_string_message(host, coze):
    coze.stream(chat_events("A cat and a report."))

    results = await run(host, coze, "what are these?", **picture_and_report(host))

    assert completed_text(results) == "A cat and a report."
    uploads = uploaded_whole(coze.uploads)
    [message] = coze.requests[0]["additional_messages"]
    assert message["content_type"] == "object_string"
    assert json.loads(message["content"]) == [
        {"type": "text", "text": "what are these?"},
        {"type": "file", "file_id": uploads["report.pdf"].file_id},
        {"type": "image", "file_id": uploads["cat.png"].file_id},
    ]


async def test_an_input_file_the_host_does_not_have_fails_the_run_before_calling_coze(host, coze):
    data = failure(await run(host, coze, attachments=[{"artifact_id": "art-missing"}]))

    assert data["code"] == "coze.input_unavailable"
    assert coze.requests == []
    assert coze.uploads == []


async def test_an_answer_without_text_fails_as_empty_output_instead_of_an_empty_message(host, coze):
    coze.stream(chat_events())

    assert_empty_output(await run(host, coze), "coze")
