"""The local-agent runner's tool loop, history compaction and streaming cadence, against the scripted host."""

from __future__ import annotations

import asyncio

import pytest

from tests.local_agent.host import (
    ScriptedHost,
    build_context,
    drive,
    of_type,
    text,
    tool_call,
    transcript_item,
    usage,
)
from tests.local_agent.plugin import history, runner

LocalAgentRunner = runner.LocalAgentRunner
ECHO_TOOL = [{"tool_name": "echo", "description": "Echo", "parameters": {"type": "object"}}]


def echo_host(delay: float = 0.05) -> ScriptedHost:
    host = ScriptedHost()

    async def echo(parameters):
        await asyncio.sleep(delay * parameters.get("wait", 1))
        return parameters.get("say", "")

    host.tools["echo"] = echo
    return host


def two_calls() -> list[dict]:
    # The first call is slower, so a parallel run finishes the second first.
    return [
        tool_call(0, id="a", name="echo", arguments='{"say": "first", "wait": 3}'),
        tool_call(1, id="b", name="echo", arguments='{"say": "second", "wait": 1}'),
    ]


async def test_tool_calls_of_one_answer_run_in_parallel_and_report_in_call_order():
    host = echo_host()
    host.script_stream("m1", *two_calls())
    host.script_stream("m1", text("done"))

    results = await drive(LocalAgentRunner(), build_context("go", tools=ECHO_TOOL), host)

    assert host.most_tools_at_once == 2
    types = [r.type for r in results if r.type.startswith("tool.")]
    assert types == ["tool.call.started", "tool.call.started", "tool.call.completed", "tool.call.completed"]
    assert [d["result"] for d in of_type(results, "tool.call.completed")] == ["first", "second"]
    tool_messages = [m for m in host.actions("invoke_llm_stream")[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("a", "first"), ("b", "second")]


async def test_serial_tool_calls_run_one_after_another():
    host = echo_host()
    host.script_stream("m1", *two_calls())
    host.script_stream("m1", text("done"))

    results = await drive(
        LocalAgentRunner(), build_context("go", tools=ECHO_TOOL, config={"parallel-tool-calls": False}), host
    )

    assert host.most_tools_at_once == 1
    types = [r.type for r in results if r.type.startswith("tool.")]
    assert types == ["tool.call.started", "tool.call.completed"] * 2


async def test_the_tool_iteration_cap_ends_the_turn_with_a_clear_message():
    host = echo_host(0)
    for _ in range(3):
        host.script_stream("m1", tool_call(0, id="x", name="echo", arguments='{"say": "again"}'))

    results = await drive(
        LocalAgentRunner(), build_context("loop", tools=ECHO_TOOL, config={"max-tool-iterations": 2}), host
    )

    assert len(host.actions("call_tool")) == 2
    final = of_type(results, "message.completed")[0]["message"]["content"]
    assert final.startswith("I stopped after 2 rounds of tool calls")
    assert of_type(results, "message.delta")[-1]["chunk"]["content"] == final
    assert results[-1].type == "run.completed"
    assert results[-1].data["metadata"]["tool_rounds"] == 2


async def test_a_long_tool_result_is_truncated_with_a_marker():
    host = echo_host(0)
    host.script_stream("m1", tool_call(0, id="x", name="echo", arguments='{"say": "' + "z" * 1000 + '"}'))
    host.script_stream("m1", text("ok"))

    results = await drive(
        LocalAgentRunner(), build_context("go", tools=ECHO_TOOL, config={"max-tool-result-chars": 300}), host
    )

    sent = next(m for m in host.actions("invoke_llm_stream")[1]["messages"] if m["role"] == "tool")["content"]
    assert sent.startswith("z" * 300 + "\n[… tool result truncated: 700 of 1000 characters omitted]")
    assert of_type(results, "tool.call.completed")[0]["result"] == sent


async def test_a_model_without_tool_support_is_offered_no_tools():
    host = echo_host()
    host.script_stream("m1", text("plain"))
    models = [{"model_id": "m1", "operations": ["stream"], "supports_tools": False}]

    await drive(LocalAgentRunner(), build_context("go", models=models, tools=ECHO_TOOL), host)

    assert "tools" not in host.actions("invoke_llm_stream")[0]


async def test_tools_without_a_schema_are_described_by_the_host():
    host = echo_host()
    host.tool_details["echo"] = {"tool_name": "echo", "description": "Says it back", "parameters": {"type": "object"}}
    host.script_stream("m1", text("plain"))

    await drive(LocalAgentRunner(), build_context("go", tools=[{"tool_name": "echo"}]), host)

    offered = host.actions("invoke_llm_stream")[0]["tools"][0]["function"]
    assert offered["description"] == "Says it back"


async def test_with_enable_all_tools_off_only_the_named_tools_are_offered():
    host = echo_host()
    host.script_stream("m1", text("plain"))
    tools = [*ECHO_TOOL, {"tool_name": "other", "description": "x", "parameters": {"type": "object"}}]

    await drive(
        LocalAgentRunner(),
        build_context("go", tools=tools, config={"enable-all-tools": False, "tools": ["other"]}),
        host,
    )

    assert [t["function"]["name"] for t in host.actions("invoke_llm_stream")[0]["tools"]] == ["other"]


async def test_text_before_and_after_tool_calls_streams_as_one_reply():
    host = echo_host(0)
    host.script_stream("m1", text("Let me check."), tool_call(0, id="x", name="echo", arguments="{}"))
    host.script_stream("m1", text("Done."))

    results = await drive(LocalAgentRunner(), build_context("go", tools=ECHO_TOOL), host)

    deltas = "".join(d["chunk"]["content"] for d in of_type(results, "message.delta"))
    assert deltas == "Let me check.\n\nDone."
    assert of_type(results, "message.completed")[0]["message"]["content"] == deltas


async def test_cumulative_deliveries_get_the_text_every_n_chunks():
    host = ScriptedHost()
    host.script_stream("m1", *[text(str(i)) for i in range(7)], usage(1, 7))
    ctx = build_context("go", platform_capabilities={"stream_mode": "cumulative"}, config={"stream-snapshot-chunks": 3})

    results = await drive(LocalAgentRunner(), ctx, host)

    assert [d["chunk"]["content"] for d in of_type(results, "message.delta")] == ["012", "345", "6"]
    assert of_type(results, "message.completed")[0]["message"]["content"] == "0123456"


@pytest.mark.parametrize(
    ("edits", "capabilities", "expected"),
    [
        # A chat platform that edits one message as it grows (Telegram, Slack, Discord, Lark): snapshots.
        (True, {}, ["012", "345", "6"]),
        # The web chat (no edits): every fragment.
        (False, {}, ["0", "1", "2", "3", "4", "5", "6"]),
        # The delivery may ask for fragments even where it edits.
        (True, {"stream_mode": "fragments"}, ["0", "1", "2", "3", "4", "5", "6"]),
    ],
)
async def test_a_delivery_that_edits_its_message_gets_snapshots_and_the_web_chat_fragments(
    edits, capabilities, expected
):
    host = ScriptedHost()
    host.script_stream("m1", *[text(str(i)) for i in range(7)], usage(1, 7))
    ctx = build_context("go", edits=edits, platform_capabilities=capabilities, config={"stream-snapshot-chunks": 3})

    results = await drive(LocalAgentRunner(), ctx, host)

    assert [d["chunk"]["content"] for d in of_type(results, "message.delta")] == expected
    assert of_type(results, "message.completed")[0]["message"]["content"] == "0123456"


# --- history and compaction ---------------------------------------------------------------------------


def long_conversation(turns: int, words: int = 60) -> list[dict]:
    items = []
    for n in range(turns):
        items.append(transcript_item(2 * n + 1, "user", f"question {n} " + "word " * words))
        items.append(transcript_item(2 * n + 2, "assistant", f"answer {n} " + "word " * words))
    return items


async def test_a_history_over_budget_is_summarised_into_a_checkpoint_in_conversation_state():
    host = ScriptedHost()
    host.transcript = [*long_conversation(10), transcript_item(21, "user", "and now?", event_id="evt-current")]
    host.script_reply("m1", {"message": {"role": "assistant", "content": "SUMMARY: ten questions asked"}})
    host.script_stream("m1", text("answer"))
    config = {"context-window-tokens": 1500, "reserve-tokens": 200, "keep-recent-tokens": 300, "max-round": 0}

    results = await drive(
        LocalAgentRunner(), build_context("and now?", config=config, transcript_seq=21, latest_cursor="20"), host
    )

    checkpoint = host.state[history.CHECKPOINT_KEY]
    summarised = results[-1].data["metadata"]["history"]["summarised_messages"]
    assert checkpoint["cursor"] == str(summarised)
    assert checkpoint["fences"][0]["kind"] == "conversation-summary"
    assert checkpoint["fences"][0]["content"] == "SUMMARY: ten questions asked"
    updates = [r.data for r in results if r.type == "state.updated"]
    assert updates == [{"scope": "conversation", "key": history.CHECKPOINT_KEY, "value": checkpoint}]
    summary_prompt = host.actions("invoke_llm")[0]["messages"][1]["content"]
    newest_summarised = host.transcript[summarised - 1]["content"]
    assert newest_summarised.split(" word")[0] in summary_prompt
    sent = host.actions("invoke_llm_stream")[0]["messages"]
    assert sent[1]["role"] == "system"
    assert sent[1]["content"].startswith("<conversation-summary")
    assert "question 0" not in str(sent)
    assert sent[2]["role"] == "user"
    assert sent[-1] == {"role": "user", "content": "and now?"}


async def test_after_a_checkpoint_only_the_newer_history_is_paged_forward_from_its_cursor():
    host = ScriptedHost()
    host.transcript = [*long_conversation(3, words=2), transcript_item(7, "user", "next", event_id="evt-current")]
    host.state[history.CHECKPOINT_KEY] = {
        "version": 1,
        "cursor": "4",
        "fences": [{"kind": "conversation-summary", "content": "earlier: two questions", "attrs": {}, "turn": "run-0"}],
    }
    host.script_stream("m1", text("ok"))

    results = await drive(LocalAgentRunner(), build_context("next", transcript_seq=7, latest_cursor="6"), host)

    pages = host.actions("history_page")
    assert [(p.get("after_cursor"), p["direction"]) for p in pages] == [("4", "forward")]
    sent = host.actions("invoke_llm_stream")[0]["messages"]
    assert "earlier: two questions" in sent[1]["content"]
    assert [m["content"].split()[0] for m in sent[2:-1]] == ["question", "answer"]
    assert "question 2" in sent[2]["content"]
    assert results[-1].data["metadata"]["history"]["incremental"] is True
    assert host.actions("state_set") == []


async def test_turn_only_fences_are_not_carried_into_the_checkpoint():
    host = ScriptedHost()
    host.kb["kb1"] = [{"id": "d#0", "content": "a fact", "score": 1.0, "metadata": {}}]
    host.transcript = [*long_conversation(10), transcript_item(21, "user", "q", event_id="evt-current")]
    host.script_reply("m1", {"message": {"role": "assistant", "content": "SUMMARY"}})
    host.script_stream("m1", text("answer"))
    config = {"context-window-tokens": 1500, "reserve-tokens": 200, "keep-recent-tokens": 300}

    await drive(
        LocalAgentRunner(), build_context("q", kbs=["kb1"], config=config, transcript_seq=21, latest_cursor="20"), host
    )

    kinds = [f["kind"] for f in host.state[history.CHECKPOINT_KEY]["fences"]]
    assert kinds == ["conversation-summary"]
    assert any("<knowledge-context" in str(m["content"]) for m in host.actions("invoke_llm_stream")[0]["messages"])


async def test_max_round_keeps_that_many_rounds_verbatim_and_summarises_the_rest():
    host = ScriptedHost()
    host.transcript = [*long_conversation(5, words=2), transcript_item(11, "user", "q", event_id="evt-current")]
    host.script_reply("m1", {"message": {"role": "assistant", "content": "older rounds"}})
    host.script_stream("m1", text("answer"))

    await drive(
        LocalAgentRunner(), build_context("q", config={"max-round": 2}, transcript_seq=11, latest_cursor="10"), host
    )

    sent = host.actions("invoke_llm_stream")[0]["messages"]
    verbatim = [m["content"].split()[:2] for m in sent if m["role"] in ("user", "assistant")][:-1]
    assert verbatim == [["question", "3"], ["answer", "3"], ["question", "4"], ["answer", "4"]]
    assert host.state[history.CHECKPOINT_KEY]["cursor"] == "6"


async def test_without_state_the_older_history_is_left_out_instead_of_summarised():
    host = ScriptedHost()
    host.transcript = [*long_conversation(10), transcript_item(21, "user", "q", event_id="evt-current")]
    host.script_stream("m1", text("answer"))
    config = {"context-window-tokens": 1500, "reserve-tokens": 200, "keep-recent-tokens": 300}

    results = await drive(
        LocalAgentRunner(), build_context("q", state=False, config=config, transcript_seq=21, latest_cursor="20"), host
    )

    assert host.actions("invoke_llm") == []
    assert host.actions("invoke_llm_stream")[0]["messages"][-1]["content"].startswith("<runner-notice>")
    meta = results[-1].data["metadata"]["history"]
    assert meta["compacted"] is False
    assert meta["left_out_messages"] > 0


async def test_the_host_token_count_calibrates_the_budget():
    host = ScriptedHost()
    host.count_tokens = lambda request: 5000
    host.transcript = [*long_conversation(2, words=2), transcript_item(5, "user", "q", event_id="evt-current")]
    host.script_reply("m1", {"message": {"role": "assistant", "content": "S"}})
    host.script_stream("m1", text("answer"))

    results = await drive(
        LocalAgentRunner(),
        build_context("q", config={"context-window-tokens": 2000}, transcript_seq=5, latest_cursor="4"),
        host,
    )

    assert results[-1].data["metadata"]["context"]["token_count"] == "host"
    assert host.actions("count_tokens")[0]["model_id"] == "m1"
