"""LangBot's runner protocol ↔ ours, without processes: what a LangBot runner lists becomes a manifest our
catalog accepts, what it yields becomes results our protocol accepts, what it calls becomes our proxy
requests (or is refused), and our answers take the shape LangBot's SDK reads."""

from __future__ import annotations

from typing import Any

import pytest

from langbot_sdk.protocol import PROXY_REQUEST_MODELS, Action, AgentRunResult
from runtimes.langbot import translate


def _entry(**manifest: Any) -> dict[str, Any]:
    return {
        "plugin_author": "alice",
        "plugin_name": "weather",
        "plugin_version": "1.2.0",
        "runner_name": "default",
        "manifest": {
            "id": "plugin:alice/weather/default",
            "name": "default",
            "label": {"en_US": "Weather", "zh_Hans": "天气"},
            "usages": ["agent"],
            **manifest,
        },
    }


def test_a_listed_runner_becomes_our_manifest_with_what_has_no_equivalent_named() -> None:
    manifest, warnings = translate.runner_manifest(
        _entry(
            capabilities={"streaming": True, "interrupt": True, "steering": True},
            permissions={"models": ["invoke", "count_tokens"], "history": ["page", "search"], "storage": ["plugin"]},
            config_schema=[
                {"name": "model", "type": "llm-model-selector", "label": {"en_US": "Model"}, "options": None},
                {"name": "mood", "type": "select", "label": {"en_US": "Mood"}, "options": [
                    {"name": "calm", "label": {"en_US": "Calm"}},
                ]},
                {"name": "box", "type": "box-selector", "label": {"en_US": "Box"}},
            ],
        )
    )  # fmt: skip
    assert manifest.id == "plugin:alice/weather/default"
    assert manifest.label.root == {"en_US": "Weather", "zh_Hans": "天气"}
    assert (manifest.capabilities.streaming, manifest.capabilities.interrupt) == (True, True)
    assert manifest.permissions.models == ["invoke"]
    assert manifest.permissions.history == ["page", "search"]
    assert manifest.permissions.storage == ["plugin"]
    assert manifest.context.supports_history_search is True
    assert [(item.name, item.type.value, item.model_kind) for item in manifest.config_schema] == [
        ("model", "model-selector", "llm"),
        ("mood", "select", None),
    ]
    assert manifest.metadata["plugin"] == {"author": "alice", "name": "weather", "version": "1.2.0"}
    # Any granted model may have its tokens counted here: nothing dropped, nothing to warn about.
    assert not any("count_tokens" in warning for warning in warnings)
    assert any("capability ['steering'] has no equivalent" in warning for warning in warnings)
    assert any("'box' dropped" in warning for warning in warnings)
    assert manifest.metadata["langbot"]["warnings"] == warnings


def test_a_runner_without_a_plugin_runner_id_is_refused() -> None:
    with pytest.raises(ValueError, match="must start with 'plugin:'"):
        translate.runner_manifest(_entry(id="weather"))


def test_load_reports_group_runners_by_plugin_with_their_warnings() -> None:
    second = _entry(id="plugin:alice/weather/hourly")
    [report] = translate.load_reports([_entry(), second], {"plugin:alice/weather/hourly": ["dropped x"]})
    assert (report.path, report.status, report.version) == ("langbot:alice/weather", "loaded", "1.2.0")
    assert report.runner_ids == ["plugin:alice/weather/default", "plugin:alice/weather/hourly"]
    assert report.warnings == ["dropped x"]


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            {"type": "message.delta", "data": {"chunk": {"role": "assistant", "content": "Hi", "is_final": False,
                                                         "all_content": "Hi", "resp_message_id": "m1"}}},
            [("message.delta", {"chunk": {"role": "assistant", "content": "Hi"}})],
        ),
        (
            {"type": "run.completed", "data": {"finish_reason": "stop", "message": {"role": "assistant",
                                                                                    "content": "Done"}},
             "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
            [
                ("message.completed", {"message": {"role": "assistant", "content": "Done"}}),
                ("run.completed", {"finish_reason": "stop", "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
            ],
        ),
        (
            {"type": "run.failed", "data": {"error": "upstream down", "code": "runner.upstream", "retryable": True}},
            [("run.failed", {"code": "runner.upstream", "message": "upstream down", "retryable": True})],
        ),
        (
            {"type": "action.requested", "data": {"action": "message.react", "target": None, "payload": {"e": 1}}},
            [("action.requested", {"action": "message.react", "target": {}, "payload": {"e": 1}})],
        ),
        (
            {"type": "tool.call.started", "data": {"tool_call_id": "c1", "tool_name": "add", "parameters": {"a": 1}}},
            [("tool.call.started", {"tool_call_id": "c1", "tool_name": "add", "parameters": {"a": 1}})],
        ),
        (
            {"type": "tool.call.completed", "data": {"tool_call_id": "c1", "tool_name": "add", "result": {"v": 2},
                                                     "error": None}},
            [("tool.call.completed", {"tool_call_id": "c1", "tool_name": "add", "result": {"v": 2}, "error": None})],
        ),
        (
            {"type": "state.updated", "data": {"scope": "conversation", "key": "turns", "value": 3}},
            [("state.updated", {"scope": "conversation", "key": "turns", "value": 3})],
        ),
        ({"type": "processor.log", "data": {"text": "thinking", "level": "info"}}, []),
    ],
)  # fmt: skip
def test_langbot_results_become_results_our_protocol_accepts(result: dict[str, Any], expected: list[Any]) -> None:
    ours = translate.results({"run_id": "r1", **result}, "r1")
    assert [(item["type"], item["data"]) for item in ours] == expected
    for item in ours:
        AgentRunResult.coerce(item)  # strict: unknown fields or a wrong payload raise


def _call(action: str, data: dict[str, Any]) -> tuple[Action, dict[str, Any]]:
    translated = translate.host_call(action, data)
    assert translated is not None, action
    return translated


def test_host_calls_become_our_proxy_requests() -> None:
    action, request = _call(
        "invoke_llm",
        {
            "run_id": "r1",
            "llm_model_uuid": "m1",
            "messages": [{"role": "user", "content": "hi", "all_content": None}],
            "funcs": [{"name": "add", "human_desc": "Adds", "description": "Add two numbers", "parameters": {}}],
            "extra_args": {"temperature": 0},
            "timeout": 30,
        },
    )
    assert action == Action.INVOKE_LLM
    PROXY_REQUEST_MODELS[Action.INVOKE_LLM].model_validate({**request, "run_id": "r1"})
    assert request["tools"] == [
        {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": {}}}
    ]
    action, request = _call("history_page", {"run_id": "r1", "limit": 5, "include_attachments": True})
    assert (action, request) == (Action.HISTORY_PAGE, {"limit": 5, "include_artifacts": True})
    action, request = _call(
        "set_binary_storage",
        {"run_id": "r1", "owner_type": "plugin", "owner": "a/b", "key": "k", "value_base64": "dg=="},
    ) or (None, {})
    assert (action, request) == (Action.STORAGE_SET, {"area": "plugin", "key": "k", "value_base64": "dg=="})


def test_host_calls_with_no_equivalent_are_not_translated() -> None:
    assert translate.host_call("set_binary_storage", {"owner_type": "plugin", "key": "k"}) is None  # outside a run
    assert translate.host_call("run_list", {"run_id": "r1"}) is None
    assert translate.host_call("steering_pull", {"run_id": "r1"}) is None


def test_our_answers_take_the_shape_langbot_reads() -> None:
    page = translate.host_answer(
        "history_page",
        Action.HISTORY_PAGE,
        {"items": [{"item_id": "t1", "cursor": "c1", "conversation_id": "c", "role": "user", "content": "hi",
                    "created_at": "2026-01-02T03:04:05+00:00"}], "has_more": False},
    )  # fmt: skip
    [item] = page["items"]
    assert (item["transcript_id"], item["event_id"], item["created_at"]) == ("t1", "", 1767323045)
    detail = translate.host_answer("get_tool_detail", Action.GET_TOOL_DETAIL, {"tool_name": "add", "parameters": {}})
    assert detail == {"tool": {"tool_name": "add", "name": "add", "parameters": {}}}
    entries = [{"id": "d1", "content": "Paris is the capital", "score": 0.9, "metadata": {}}]
    found = translate.host_answer("retrieve_knowledge_base", Action.RETRIEVE_KNOWLEDGE_BASE, {"entries": entries})
    assert found["results"] == entries
    assert translate.host_answer("state_set", Action.STATE_SET, {})["success"] is True


def test_a_tool_result_is_the_object_langbots_sdk_requires() -> None:
    """LangBot's SDK validates `tool.call.completed`'s `result` as an object: a bare string failed the run."""

    def answered(answer: dict[str, Any]) -> Any:
        return translate.host_answer("call_tool", Action.CALL_TOOL, answer)["result"]

    assert answered({"result": "4", "is_error": False}) == {"content": "4"}
    # The tool reported an error: still an answer the runner can hand to its model.
    failed = answered({"result": "division by zero", "is_error": True})
    assert failed == {"content": "division by zero", "is_error": True}
    reference = {"preview": "aaa", "artifact_id": "a1", "size": 40000, "truncated": True}
    assert answered({"result": reference, "is_error": False}) == reference
    assert answered({"result": None}) == {"content": ""}


def test_a_rerank_call_and_its_scores_take_langbots_shape() -> None:
    action, request = _call(
        "invoke_rerank",
        {"run_id": "r1", "rerank_model_uuid": "rr", "query": "capital", "documents": ["a", "b"], "top_k": 1,
         "extra_args": {}},
    )  # fmt: skip
    assert (action, request) == (Action.INVOKE_RERANK, {"model_id": "rr", "query": "capital", "documents": ["a", "b"],
                                                        "top_k": 1})  # fmt: skip
    PROXY_REQUEST_MODELS[Action.INVOKE_RERANK].model_validate({**request, "run_id": "r1"})
    scores = translate.host_answer(
        "invoke_rerank", Action.INVOKE_RERANK, {"results": [{"index": 1, "score": 0.9, "document": None}]}
    )
    assert scores == {"results": [{"index": 1, "relevance_score": 0.9}]}


def test_our_run_context_becomes_langbots() -> None:
    context = translate.run_context(
        {
            "run_id": "r1",
            "trigger": {"type": "message.received", "source": "pipeline_adapter"},
            "event": {"event_id": "e1", "event_type": "message.received", "source": "api"},
            "input": {"text": "hi"},
            "delivery": {"surface": "api"},
            "resources": {
                "models": [{"model_id": "m1", "kind": "llm", "operations": ["invoke", "stream"]}],
                "storage": {"areas": ["workspace"]},
            },
            "runtime": {"trace_id": "t", "deadline_at": 123.0},
            "bootstrap": {"messages": []},
            "adapter": {"adapter_type": "pipeline", "data": {"query_id": 7}},
        }
    )
    assert context["trigger"]["source"] == "host_adapter"
    assert context["resources"]["models"] == [
        {"model_id": "m1", "model_type": "llm", "provider": None, "operations": ["invoke", "stream", "count_tokens"]}
    ]
    assert context["resources"]["storage"] == {"plugin_storage": False, "workspace_storage": True}
    assert context["adapter"] == {"extra": {"adapter_type": "pipeline", "query_id": 7}}
    assert "bootstrap" not in context


def test_the_sender_id_is_the_launchers_raw_id() -> None:
    conversation = {"conversation_id": "c", "launcher_type": "group", "launcher_id": "g-1"}
    in_group = translate.run_context(
        {"conversation": conversation, "actor": {"actor_type": "user", "actor_id": "u-7"}, "trigger": {}}
    )
    private = translate.run_context(
        {
            "conversation": {**conversation, "launcher_type": "person", "launcher_id": "u-7"},
            "actor": {"actor_type": "user", "actor_id": "u-7"},
            "trigger": {},
        }
    )
    assert in_group["conversation"]["sender_id"] == "u-7"
    assert in_group["conversation"]["launcher_id"] == "g-1"
    assert private["conversation"]["sender_id"] == private["conversation"]["launcher_id"] == "u-7"


def test_a_streamed_model_answer_takes_langbots_frame_shape() -> None:
    first = translate.stream_answer(Action.INVOKE_LLM_STREAM, {"delta": {"role": "assistant", "content": "He"}})
    last = translate.stream_answer(
        Action.INVOKE_LLM_STREAM,
        {"delta": {"role": "assistant", "content": "llo"}, "finish_reason": "stop", "usage": {"total_tokens": 5}},
    )
    assert first == {"chunk": {"role": "assistant", "content": "He", "is_final": False}}
    assert last == {"chunk": {"role": "assistant", "content": "llo", "is_final": True}, "usage": {"total_tokens": 5}}
