"""The tbox-agent runner against a local fake Tbox app API, driven through the real plugin runtime by a
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
    picture_and_report,
)
from tests.fakes.tbox_server import APP_ID, TOKEN

TBOX = RunnerUnderTest(
    "plugin:langbot/tbox-agent/default", lambda tbox: {"api-key": TOKEN, "app-id": APP_ID, "base-url": tbox.base_url}
)
run = TBOX.run


async def test_an_apps_answer_streams_as_deltas_then_one_message(host, tbox):
    tbox.answer("Hel", "lo", " there")

    results = await run(host, tbox, "hello")

    assert types_of(results) == ["message.delta"] * 3 + ["state.updated", "message.completed", "run.completed"]
    assert [r["data"]["chunk"]["content"] for r in results[:3]] == ["Hel", "lo", " there"]
    assert completed_text(results) == "Hello there"
    assert tbox.requests[0] == {"appId": APP_ID, "query": "hello", "userId": "person_u-42", "stream": True}
    assert tbox.authorizations == [TOKEN]
    assert results[-1]["data"]["metadata"]["tbox_message_id"] == "tbox-msg-1"


async def test_without_a_streaming_surface_the_app_answers_whole_with_its_reasoning(host, tbox):
    tbox.answer("Four.", thinking=("2+2 is 4",))

    results = await run(host, tbox, "2+2?", streaming=False)

    assert types_of(results) == ["state.updated", "message.completed", "run.completed"]
    assert completed_text(results) == "<think>\n2+2 is 4\n</think>\nFour."
    assert tbox.requests[0]["stream"] is False


async def test_streamed_reasoning_is_shown_inside_think_tags_before_the_answer(host, tbox):
    tbox.answer("Four.", thinking=("2+2", " is 4"))

    results = await run(host, tbox, "2+2?")

    assert completed_text(results) == "<think>\n2+2 is 4\n</think>\nFour."


async def test_only_the_conversation_id_tbox_issued_is_kept_and_sent_on_the_next_turn(host, tbox):
    tbox.answer("one")
    tbox.answer("two")
    tbox.answer("other")

    first = await run(host, tbox, "turn one", conversation_id="langbot-conv-1")
    second = await run(host, tbox, "turn two", conversation_id="langbot-conv-1")
    await run(host, tbox, "other chat", conversation_id="langbot-conv-2")

    assert "conversationId" not in tbox.requests[0]
    update = next(r for r in first if r["type"] == "state.updated")["data"]
    assert update["key"] == "external.conversation_id"
    assert update["value"] in tbox.issued_conversations
    assert tbox.requests[1]["conversationId"] == update["value"]
    assert "state.updated" not in types_of(second)
    assert "conversationId" not in tbox.requests[2]


async def test_input_images_are_uploaded_and_sent_as_files(host, tbox):
    tbox.answer("A cat.")

    results = await run(host, tbox, "what is this?", **picture_and_report(host))

    assert completed_text(results) == "A cat."
    [upload] = tbox.uploads
    assert (upload.name, upload.mime_type, upload.content) == ("cat.png", "image/png", b"\x89PNG fake image bytes")
    assert tbox.requests[0]["files"] == [{"fileId": upload.file_id, "type": "IMAGE"}]


async def test_an_error_event_fails_the_run_with_tboxs_description(host, tbox):
    tbox.error_event("SECURITY_BLOCK", "the content was blocked by the safety check", after=("par",))

    data = failure(await run(host, tbox))

    assert data["code"] == "tbox.error"
    assert "blocked by the safety check" in data["message"]
    assert data["details"]["platform_code"] == "SECURITY_BLOCK"


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_refusal_with_an_error_code_fails_the_run_with_its_message(host, tbox, streaming):
    tbox.refuse("APP_NOT_FOUND", "app does not exist")

    data = failure(await run(host, tbox, streaming=streaming))

    assert data["code"] == "tbox.http_error"
    assert "app does not exist" in data["message"]
    assert data["details"] == {"platform_code": "APP_NOT_FOUND"}


@pytest.mark.parametrize(
    ("status", "code", "retryable"), [(429, "tbox.rate_limited", True), (503, "tbox.unavailable", True)]
)
async def test_tboxs_http_errors_fail_the_run(host, tbox, status, code, retryable):
    tbox.fail(status, str(status), "busy")

    data = failure(await run(host, tbox))

    assert (data["code"], data["retryable"]) == (code, retryable)
    assert data["details"]["status"] == status


async def test_a_wrong_token_is_refused_and_the_token_is_not_shown(host, tbox, caplog):
    log_everything(caplog)
    results = await run(host, tbox, config={"api-key": "tbox-wrong-token-123"})

    data = failure(results)
    assert data["code"] == "tbox.http_error"
    assert "token is invalid" in data["message"]
    assert_secret_nowhere("tbox-wrong-token-123", results, caplog)


async def test_a_tbox_that_stops_answering_times_out_retryably_and_the_stream_is_closed(host, tbox):
    tbox.answer("slow", " answer", hold_after=2)

    results = await run(host, tbox, config={"timeout": 0.5})

    await assert_timed_out_and_closed(results, "tbox", tbox)


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"api-key": ""}, "api-key"), ({"app-id": None}, "app-id"), ({"base-url": "tbox"}, "base-url"),
     ({"timeout": True}, "timeout")],
)  # fmt: skip
async def test_missing_or_bad_config_fails_naming_the_field_without_calling_tbox(host, tbox, fields, field):
    results = await run(host, tbox, config=fields)

    assert_config_invalid(results, "tbox", field, tbox)


async def test_cancelling_a_run_closes_the_tbox_stream(host, tbox):
    tbox.answer("first", " second", hold_after=2)

    results = await TBOX.cancelled_after_first_delta(host, tbox)

    assert results[0]["data"]["chunk"]["content"] == "first"
    await assert_cancelled_and_closed(results, tbox)


@pytest.mark.parametrize("streaming", [True, False])
async def test_an_answer_without_text_fails_as_empty_output_instead_of_an_empty_message(host, tbox, streaming):
    tbox.answer("", thinking=("only thoughts",))

    results = await run(host, tbox, streaming=streaming)

    assert_empty_output(results, "tbox")
