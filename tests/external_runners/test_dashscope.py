"""The dashscope-agent runner against a local fake DashScope app API, driven through the real plugin runtime
by a scripted host (tests/external_runners/host.py)."""

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
    deltas,
    failure,
    log_everything,
)
from tests.fakes.dashscope_server import API_KEY, APP_ID, reference

DASHSCOPE = RunnerUnderTest(
    "plugin:langbot/dashscope-agent/default",
    lambda dashscope: {"app-type": "agent", "api-key": API_KEY, "app-id": APP_ID, "base-url": dashscope.base_url},
)
run = DASHSCOPE.run


async def test_an_agent_apps_answer_streams_as_deltas_then_one_message_and_usage(host, dashscope):
    dashscope.answer("Hel", "lo", " there")

    results = await run(host, dashscope, "hello")

    assert types_of(results) == ["message.delta"] * 3 + ["state.updated", "message.completed", "run.completed"]
    assert deltas(results) == ["Hel", "lo", " there"]
    assert completed_text(results) == "Hello there"
    assert results[-1]["data"]["usage"] == {
        "prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150, "source": "dashscope",
    }  # fmt: skip
    assert dashscope.requests[0] == {
        "input": {"prompt": "hello"}, "parameters": {"incremental_output": True}, "debug": {},
    }  # fmt: skip
    headers = dashscope.headers[0]
    assert (headers["x-dashscope-sse"], headers["authorization"]) == ("enable", f"Bearer {API_KEY}")


async def test_without_a_streaming_surface_the_app_answers_whole_and_replies_once(host, dashscope):
    dashscope.answer("All ", "at once", usage={"models": [{"input_tokens": 5, "output_tokens": 2},
                                                          {"input_tokens": 1, "output_tokens": 1}]})  # fmt: skip

    results = await run(host, dashscope, streaming=False)

    assert types_of(results) == ["state.updated", "message.completed", "run.completed"]
    assert completed_text(results) == "All at once"
    assert results[-1]["data"]["usage"]["total_tokens"] == 9
    assert "x-dashscope-sse" not in dashscope.headers[0]
    assert dashscope.requests[0]["parameters"] == {"incremental_output": False}


async def test_a_workflow_app_streams_its_workflow_messages(host, dashscope):
    dashscope.answer("Work", "flow says hi")

    results = await run(host, dashscope, "go", config={"app-type": "workflow"})

    assert deltas(results) == ["Work", "flow says hi"]
    assert completed_text(results) == "Workflow says hi"
    assert dashscope.requests[0]["parameters"] == {"incremental_output": True, "flow_stream_mode": "message_format"}
    # the pipeline variables LangBot passed a workflow as its parameters
    assert dashscope.requests[0]["input"]["biz_params"] == {
        "user_message_text": "go",
        "session_id": "person_u-42",
        "conversation_id": "langbot-conv-1",
        "msg_create_time": 1_700_000_000,
    }


async def test_only_the_session_id_dashscope_issued_is_kept_and_sent_on_the_next_turn(host, dashscope):
    dashscope.answer("one")
    dashscope.answer("two")
    dashscope.answer("other")

    first = await run(host, dashscope, "turn one", conversation_id="langbot-conv-1")
    second = await run(host, dashscope, "turn two", conversation_id="langbot-conv-1")
    await run(host, dashscope, "other chat", conversation_id="langbot-conv-2")

    assert "session_id" not in dashscope.requests[0]["input"]
    update = next(r for r in first if r["type"] == "state.updated")["data"]
    assert update["key"] == "external.session_id"
    assert update["value"] in dashscope.issued_sessions
    assert dashscope.requests[1]["input"]["session_id"] == update["value"]
    assert "state.updated" not in types_of(second)
    assert "session_id" not in dashscope.requests[2]["input"]
    assert host.state[("langbot-conv-2", "conversation", "external.session_id")] != update["value"]


async def test_document_references_are_rendered_with_the_configured_quote_and_kept_as_citations(host, dashscope):
    handbook = reference("1", "handbook.pdf", "Employees get 25 days of vacation.")
    policy = reference("2", "policy.docx")
    dashscope.answer("You get 25 days<r", "ef>[1]</ref>.", references=[handbook, policy])

    results = await run(host, dashscope, "vacation?", config={"references_quote": "Source:"})

    assert "".join(deltas(results)) == "You get 25 days."
    assert completed_text(results) == "You get 25 days(Source: handbook.pdf).\n\nSource: policy.docx"
    citations = results[-1]["data"]["metadata"]["citations"]
    assert [c["doc_name"] for c in citations] == ["handbook.pdf", "policy.docx"]
    assert citations[0]["content"] == "Employees get 25 days of vacation."


async def test_the_older_spelling_of_the_quote_prefix_is_used_when_set_and_langbots_default_otherwise(host, dashscope):
    dashscope.answer("See<ref>[1]</ref>", references=[reference("1", "a.md")])
    dashscope.answer("See<ref>[1]</ref>", references=[reference("1", "a.md")])

    older = await run(host, dashscope, config={"references-quote": "From:", "references_quote": "ignored"})
    default = await run(host, dashscope)

    assert completed_text(older) == "See(From: a.md)"
    assert completed_text(default) == "See(参考资料来自: a.md)"


async def test_an_error_event_fails_the_run_with_dashscopes_code_and_message(host, dashscope):
    dashscope.error_event("DataInspectionFailed", "Input data may contain inappropriate content.", after=("par",))

    data = failure(await run(host, dashscope))

    assert data["code"] == "dashscope.error"
    assert data["retryable"] is False
    assert "inappropriate content" in data["message"]
    assert data["details"]["platform_code"] == "DataInspectionFailed"


@pytest.mark.parametrize(
    ("status", "dashscope_code", "code", "retryable"),
    [
        (400, "InvalidParameter", "dashscope.http_error", False),
        (429, "Throttling.RateQuota", "dashscope.rate_limited", True),
        (500, "InternalError", "dashscope.unavailable", True),
    ],
)
async def test_dashscopes_error_answers_fail_the_run_with_its_message(
    host, dashscope, status, dashscope_code, code, retryable
):
    dashscope.fail(status, dashscope_code, f"{dashscope_code} happened")

    data = failure(await run(host, dashscope))

    assert (data["code"], data["retryable"]) == (code, retryable)
    assert f"{dashscope_code} happened" in data["message"]
    assert data["details"] == {"status": status, "platform_code": dashscope_code}


async def test_a_wrong_key_or_app_is_refused_and_the_key_is_not_shown(host, dashscope, caplog):
    log_everything(caplog)
    results = await run(host, dashscope, config={"api-key": "sk-wrong-key-123"})
    unknown = failure(await run(host, dashscope, config={"app-id": "nope"}))

    assert failure(results)["details"] == {"status": 401, "platform_code": "InvalidApiKey"}
    assert_secret_nowhere("sk-wrong-key-123", results, caplog)
    assert "App not found" in unknown["message"]


async def test_a_dashscope_that_stops_answering_times_out_retryably_and_the_stream_is_closed(host, dashscope):
    dashscope.answer("slow", " answer", hold_after=1)

    results = await run(host, dashscope, config={"timeout": 0.5})

    await assert_timed_out_and_closed(results, "dashscope", dashscope)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"api-key": ""}, "api-key"),
        ({"app-id": None}, "app-id"),
        ({"app-type": "chat"}, "app-type"),
        ({"base-url": "dashscope"}, "base-url"),
        ({"timeout": 0}, "timeout"),
    ],
)
async def test_missing_or_bad_config_fails_naming_the_field_without_calling_dashscope(host, dashscope, fields, field):
    results = await run(host, dashscope, config=fields)

    assert_config_invalid(results, "dashscope", field, dashscope)


async def test_cancelling_a_run_closes_the_dashscope_stream(host, dashscope):
    dashscope.answer("first", " second", hold_after=1)

    results = await DASHSCOPE.cancelled_after_first_delta(host, dashscope)

    assert results[0]["data"]["chunk"]["content"] == "first"
    await assert_cancelled_and_closed(results, dashscope)


async def test_an_answer_without_text_fails_as_empty_output_instead_of_an_empty_message(host, dashscope):
    dashscope.answer("")

    assert_empty_output(await run(host, dashscope), "dashscope")


async def test_an_input_with_only_a_file_is_refused_since_apps_are_sent_text(host, dashscope):
    picture = host.add_artifact("cat.png", "image/png", b"\x89PNG")

    data = failure(await run(host, dashscope, "", contents=[{"type": "image", "artifact_id": picture}]))

    assert data["code"] == "dashscope.empty_input"
    assert dashscope.requests == []
