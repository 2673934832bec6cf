"""The local agent's parity list, one named test each: non-streaming, streaming, errors, timeout,
missing config, model fallback, tool calling, knowledge retrieval, multimodal input, the effective prompt,
rerank — the local-agent runner driven by a scripted in-process host (tests/local_agent/host.py)."""

from __future__ import annotations

import json

from langbot_sdk.protocol import AgentAPIException
from tests.local_agent.host import (
    ScriptedHost,
    build_context,
    drive,
    hang,
    of_type,
    text,
    tool_call,
    transcript_item,
    usage,
)
from tests.local_agent.plugin import runner

LocalAgentRunner = runner.LocalAgentRunner
TWO_MODELS = [
    {"model_id": "m1", "operations": ["invoke", "stream"], "supports_tools": True},
    {"model_id": "m2", "operations": ["invoke", "stream"], "supports_tools": True},
]


def sent_messages(host: ScriptedHost, action: str = "invoke_llm_stream", index: int = -1) -> list[dict]:
    return host.actions(action)[index]["messages"]


async def test_parity_non_streaming_delivery_gets_one_whole_answer():
    host = ScriptedHost()
    host.script_reply("m1", {"message": {"role": "assistant", "content": "whole answer"}, "usage": {"total_tokens": 9}})

    results = await drive(LocalAgentRunner(), build_context("hi", streaming=False), host)

    assert [r.type for r in results] == ["message.completed", "run.completed"]
    assert results[0].data["message"]["content"] == "whole answer"
    assert host.actions("invoke_llm_stream") == []
    assert results[-1].data["usage"] == {"total_tokens": 9}


async def test_parity_streaming_sends_fragments_then_the_completed_message_with_usage():
    host = ScriptedHost()
    host.script_stream("m1", text("Hel"), text("lo"), text(" there"), usage(12, 3))

    results = await drive(LocalAgentRunner(), build_context("hi"), host)

    assert [d["chunk"]["content"] for d in of_type(results, "message.delta")] == ["Hel", "lo", " there"]
    assert of_type(results, "message.completed")[0]["message"]["content"] == "Hello there"
    done = results[-1]
    assert done.type == "run.completed"
    assert done.data["usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    assert done.data["metadata"]["models_used"] == ["m1"]


async def test_parity_error_a_model_failing_after_its_first_chunk_fails_the_run_without_fallback():
    host = ScriptedHost()
    host.script_stream("m1", text("partial"), AgentAPIException.runtime_error("provider dropped the stream"))
    host.script_stream("m2", text("should never be asked"))

    results = await drive(
        LocalAgentRunner(), build_context("hi", models=TWO_MODELS, config={"fallback-models": ["m2"]}), host
    )

    assert of_type(results, "message.delta")[0]["chunk"]["content"] == "partial"
    failed = results[-1]
    assert failed.type == "run.failed"
    assert failed.data["code"] == "local_agent.model_failed"
    assert "provider dropped the stream" in failed.data["message"]
    assert failed.data["details"]["after_first_chunk"] is True
    assert [c["model_id"] for c in host.actions("invoke_llm_stream")] == ["m1"]


async def test_parity_error_every_model_failing_fails_the_run_naming_each_failure():
    host = ScriptedHost()
    host.script_stream("m1", AgentAPIException.rate_limited("slow down"))
    host.script_stream("m2", AgentAPIException.runtime_error("provider is down"))

    results = await drive(
        LocalAgentRunner(), build_context("hi", models=TWO_MODELS, config={"fallback-models": ["m2"]}), host
    )

    failed = results[-1]
    assert failed.type == "run.failed"
    assert [f["code"] for f in failed.data["details"]["failures"]] == ["rate_limited", "runtime_error"]
    assert of_type(results, "message.delta") == []


async def test_parity_timeout_a_model_that_does_not_answer_in_time_falls_back_to_the_next():
    host = ScriptedHost()
    host.script_stream("m1", hang(5), text("too late"))
    host.script_stream("m2", text("from the fallback"))
    ctx = build_context("hi", models=TWO_MODELS, config={"fallback-models": ["m2"], "timeout": 1})

    results = await drive(LocalAgentRunner(), ctx, host)

    assert of_type(results, "message.completed")[0]["message"]["content"] == "from the fallback"
    failures = results[-1].data["metadata"]["model_failures"]
    assert failures == [
        {"model_id": "m1", "code": "deadline_exceeded", "message": "no answer within 1 s", "retryable": True}
    ]


async def test_parity_config_missing_model_fails_the_run_clearly_when_the_binding_allows_none():
    host = ScriptedHost()

    results = await drive(LocalAgentRunner(), build_context("hi", models=[], config={"model": ""}), host)

    assert [r.type for r in results] == ["run.failed"]
    assert results[0].data["code"] == "local_agent.no_model"
    assert "selects no model and the binding allows no chat model" in results[0].data["message"]
    assert host.calls == []


async def test_a_config_with_no_model_picked_uses_the_chat_model_the_binding_allows():
    # The host put the binding's allowed models in the snapshot because the field was left empty.
    host = ScriptedHost()
    host.script_stream("m2", text("from the allowed model"))
    models = [
        {"model_id": "embedder", "kind": "embedding", "operations": ["invoke"]},
        {"model_id": "m2", "kind": "llm", "operations": ["invoke", "stream"]},
    ]

    results = await drive(LocalAgentRunner(), build_context("hi", models=models, config={"model": ""}), host)

    assert of_type(results, "message.completed")[0]["message"]["content"] == "from the allowed model"


async def test_parity_config_selecting_a_model_the_binding_does_not_allow_fails_the_run():
    host = ScriptedHost()

    results = await drive(LocalAgentRunner(), build_context("hi", models=[], config={"model": "m9"}), host)

    assert results[0].data["code"] == "local_agent.no_model"
    assert "allows none" in results[0].data["message"]


async def test_parity_model_fallback_before_the_first_chunk_answers_with_the_next_model():
    host = ScriptedHost()
    host.script_stream("m1", AgentAPIException.rate_limited("quota"))
    host.script_stream("m2", text("fallback answer"))
    ctx = build_context("hi", models=TWO_MODELS, config={"fallback-models": ["m2"]})

    results = await drive(LocalAgentRunner(), ctx, host)

    assert [c["model_id"] for c in host.actions("invoke_llm_stream")] == ["m1", "m2"]
    assert of_type(results, "message.completed")[0]["message"]["content"] == "fallback answer"
    meta = results[-1].data["metadata"]
    assert meta["models_used"] == ["m2"]
    assert meta["model_failures"][0]["code"] == "rate_limited"


async def test_parity_legacy_model_object_primary_and_fallbacks_are_honoured():
    host = ScriptedHost()
    host.script_stream("m1", AgentAPIException.runtime_error("down"))
    host.script_stream("m2", text("ok"))
    ctx = build_context("hi", models=TWO_MODELS, config={"model": {"primary": "m1", "fallbacks": ["m2"]}})

    results = await drive(LocalAgentRunner(), ctx, host)

    assert of_type(results, "message.completed")[0]["message"]["content"] == "ok"


async def test_parity_tool_calling_runs_the_call_and_feeds_the_result_back():
    host = ScriptedHost()
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tools = [{"tool_name": "weather", "description": "Weather of a city", "parameters": schema}]

    async def weather(parameters):
        return {"city": parameters["city"], "sky": "clear"}

    host.tools["weather"] = weather
    host.script_stream(
        "m1", tool_call(0, id="c1", name="weather", arguments='{"ci'), tool_call(0, arguments='ty": "Oslo"}')
    )
    host.script_stream("m1", text("Clear in Oslo."))

    results = await drive(LocalAgentRunner(), build_context("weather?", tools=tools), host)

    assert of_type(results, "tool.call.started") == [
        {"tool_call_id": "c1", "tool_name": "weather", "parameters": {"city": "Oslo"}}
    ]
    assert of_type(results, "tool.call.completed") == [
        {"tool_call_id": "c1", "tool_name": "weather", "result": {"city": "Oslo", "sky": "clear"}}
    ]
    first, second = host.actions("invoke_llm_stream")
    assert first["tools"] == [
        {"type": "function", "function": {"name": "weather", "description": "Weather of a city", "parameters": schema}}
    ]
    assert second["messages"][-2]["tool_calls"][0]["id"] == "c1"
    assert second["messages"][-1] == {
        "role": "tool",
        "content": '{"city": "Oslo", "sky": "clear"}',
        "tool_call_id": "c1",
    }
    assert of_type(results, "message.completed")[0]["message"]["content"] == "Clear in Oslo."
    assert results[-1].data["metadata"]["tool_calls"] == 1


async def test_parity_knowledge_retrieval_is_fenced_apart_from_the_user_message_and_cited():
    host = ScriptedHost()
    host.kb["kb1"] = [
        {"id": "d1#0", "content": "LangBot runs agents.", "score": 0.9,
         "metadata": {"document_id": "d1", "document_name": "guide.md", "position": 0}},
    ]  # fmt: skip
    host.script_stream("m1", text("It runs agents [1]."))

    results = await drive(
        LocalAgentRunner(), build_context("what does it do?", kbs=["kb1"], config={"knowledge-bases": ["kb1"]}), host
    )

    retrieve = host.actions("retrieve_knowledge_base")[0]
    assert (retrieve["kb_id"], retrieve["query_text"], retrieve["top_k"]) == ("kb1", "what does it do?", 5)
    messages = sent_messages(host)
    assert messages[-1] == {"role": "user", "content": "what does it do?"}
    fence = messages[-2]
    assert fence["role"] == "user"
    assert fence["content"].startswith("<knowledge-context")
    assert "LangBot runs agents." in fence["content"]
    citations = results[-1].data["metadata"]["citations"]
    assert citations == [
        {"index": 1, "kb_id": "kb1", "chunk_id": "d1#0", "document_id": "d1", "document_name": "guide.md",
         "position": 0, "score": 0.9, "excerpt": "LangBot runs agents."},
    ]  # fmt: skip


async def test_parity_rerank_reorders_the_chunks_and_keeps_its_top_k():
    host = ScriptedHost()
    host.kb["kb1"] = [
        {"id": f"d#{i}", "content": f"chunk {i}", "score": 1 - i / 10, "metadata": {"document_id": "d", "position": i}}
        for i in range(4)
    ]
    host.rerank = lambda query, documents, top_k: [{"index": 3, "score": 0.99}, {"index": 1, "score": 0.5}]
    host.script_stream("m1", text("answer"))
    models = [
        {"model_id": "m1", "operations": ["stream"]},
        {"model_id": "rr", "kind": "rerank", "operations": ["rerank"]},
    ]
    ctx = build_context("q", models=models, kbs=["kb1"], config={"rerank-model": "rr", "rerank-top-k": 2})

    results = await drive(LocalAgentRunner(), ctx, host)

    assert host.actions("invoke_rerank")[0]["documents"] == ["chunk 0", "chunk 1", "chunk 2", "chunk 3"]
    assert host.actions("invoke_rerank")[0]["top_k"] == 2
    citations = results[-1].data["metadata"]["citations"]
    assert [(c["chunk_id"], c["rerank_score"]) for c in citations] == [("d#3", 0.99), ("d#1", 0.5)]
    fence = sent_messages(host)[-2]["content"]
    assert fence.index("chunk 3") < fence.index("chunk 1")
    assert "chunk 0" not in fence


async def test_parity_multimodal_input_sends_images_to_a_vision_model_and_files_as_references():
    host = ScriptedHost()
    host.script_stream("m1", text("a cat"))
    models = [{"model_id": "m1", "operations": ["stream"], "supports_vision": True}]
    contents = [{"type": "image_url", "image_url": "https://example.test/cat.png"}]
    attachments = [{"artifact_id": "a1", "name": "report.pdf", "mime_type": "application/pdf", "size": 2048}]

    await drive(
        LocalAgentRunner(),
        build_context("what is this?", models=models, contents=contents, attachments=attachments),
        host,
    )

    messages = sent_messages(host)
    user = next(m for m in messages if m["role"] == "user" and isinstance(m["content"], list))
    assert user["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": "https://example.test/cat.png"},
    ]
    refs = messages[-1]
    assert refs["content"].startswith("<attachment-refs>")
    assert "report.pdf, type application/pdf, 2048 bytes, artifact a1" in refs["content"]


async def test_parity_multimodal_input_a_model_without_vision_gets_the_image_as_a_reference():
    host = ScriptedHost()
    host.script_stream("m1", text("I cannot see it"))
    contents = [{"type": "image_url", "image_url": "https://example.test/cat.png", "file_name": "cat.png"}]

    await drive(LocalAgentRunner(), build_context("what is this?", contents=contents), host)

    messages = sent_messages(host)
    assert {"role": "user", "content": "what is this?"} in messages
    assert "image: cat.png" in messages[-1]["content"]


async def test_parity_effective_prompt_the_configured_prompt_then_history_then_the_message_reach_the_model():
    host = ScriptedHost()
    host.transcript = [
        transcript_item(1, "user", "my name is Ada"),
        transcript_item(2, "assistant", "Hello Ada"),
        transcript_item(3, "user", "what is my name?", event_id="evt-current"),
    ]
    host.script_stream("m1", text("Ada"))
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "assistant", "content": "Ready."}]
    ctx = build_context("what is my name?", config={"prompt": prompt}, transcript_seq=3, latest_cursor="2")

    await drive(LocalAgentRunner(), ctx, host)

    assert sent_messages(host) == [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "Ready."},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "Hello Ada"},
        {"role": "user", "content": "what is my name?"},
    ]
    page = host.actions("history_page")[0]
    assert (page["before_cursor"], page["direction"]) == ("3", "backward")


async def test_parity_tool_result_errors_reach_the_model_as_error_results():
    host = ScriptedHost()

    async def broken(parameters):
        raise AgentAPIException.runtime_error("the MCP server hung up")

    host.tools["broken"] = broken
    tools = [{"tool_name": "broken", "description": "d", "parameters": {"type": "object"}}]
    host.script_stream(
        "m1",
        tool_call(0, id="c1", name="broken", arguments="{}"),
        tool_call(1, id="c2", name="broken", arguments="{nope"),
    )
    host.script_stream("m1", text("Sorry, the tool failed."))

    results = await drive(LocalAgentRunner(), build_context("go", tools=tools), host)

    completed = of_type(results, "tool.call.completed")
    assert completed[0]["error"] == "runtime_error: the MCP server hung up"
    assert completed[1]["error"].startswith("the arguments are not valid JSON")
    tool_messages = [m for m in sent_messages(host) if m["role"] == "tool"]
    assert [m["content"][:6] for m in tool_messages] == ["Error:", "Error:"]
    assert len(host.actions("call_tool")) == 1
    assert results[-1].type == "run.completed"
    assert json.loads(json.dumps(results[-1].data))  # the whole report is JSON
