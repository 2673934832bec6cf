"""The qa-runner behaviours the debug chat's empty state suggests: `type` (a reply growing at a human pace)
and `tools` (a tool card), run by the real plugin runtime."""

from __future__ import annotations

import time

from tests.sdk.test_runtime_runs import assert_well_formed, types_of


async def test_type_streams_one_word_at_a_time_over_the_seconds_asked(runtime, make_context):
    context = make_context("qa:type:0.6 hi there")

    started = time.monotonic()
    results = await runtime.run(context)
    elapsed = time.monotonic() - started

    assert_well_formed(results, context["run_id"])
    deltas = [r["data"]["chunk"]["content"] for r in results if r["type"] == "message.delta"]
    assert len(deltas) > 10
    assert types_of(results)[-2:] == ["message.completed", "run.completed"]
    assert results[-2]["data"]["message"]["content"] == "".join(deltas)
    assert "".join(deltas).endswith("You said: hi there")
    assert elapsed >= 0.5  # spread over the time asked, not sent at once


async def test_tools_reports_a_tool_call_started_then_completed_then_replies(runtime, make_context):
    context = make_context("qa:tools rain in Oslo")

    results = await runtime.run(context)

    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["tool.call.started", "tool.call.completed", "message.completed", "run.completed"]
    started, completed = results[0]["data"], results[1]["data"]
    assert started["tool_call_id"] == completed["tool_call_id"]
    assert (started["tool_name"], started["parameters"]) == ("qa_lookup", {"query": "rain in Oslo"})
    assert completed["result"]["answer"] == "QA_TOOL:rain in Oslo"
    assert results[2]["data"]["message"]["content"] == "The qa_lookup tool answered QA_TOOL:rain in Oslo"
