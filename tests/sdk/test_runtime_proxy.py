"""Proxy calls from a runner travel back to the host over the connection that started the run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from langbot_sdk.protocol import (
    PROXY_REQUEST_MODELS,
    STREAMING_ACTIONS,
    Action,
    AgentAPIException,
    ErrorCode,
)
from langbot_sdk.wire import CallInfo
from tests.sdk.conftest import QA_IDENTITY, write_plugin

ALL_APIS = {
    "history_page": True,
    "history_search": True,
    "event_get": True,
    "event_page": True,
    "artifact_metadata": True,
    "artifact_read": True,
    "artifact_upload": True,
    "state": True,
    "storage": True,
}
ALL_RESOURCES = {
    "models": [{"model_id": "m1", "operations": ["invoke", "stream", "rerank"]}],
    "tools": [{"tool_name": "echo", "operations": ["detail", "call"]}],
    "knowledge_bases": [{"kb_id": "kb1", "operations": ["retrieve"]}],
    "storage": {"areas": ["plugin"]},
    "state": {"enabled": True, "scopes": ["conversation"]},
    "platform_capabilities": {"actions": ["message.reaction"]},
}
NOW = "2026-01-01T00:00:00+00:00"

# What a well-behaved host answers to each proxy action (valid for the SDK's result models).
HOST_ANSWERS: dict[str, Any] = {
    "invoke_llm": {"message": {"role": "assistant", "content": "pong"}},
    "invoke_llm_stream": [{"delta": {"role": "assistant", "content": "po"}}, {"delta": {"role": "assistant"}}],
    "invoke_rerank": {"results": [{"index": 1, "score": 0.9}]},
    "count_tokens": {"tokens": 3},
    "get_tool_detail": {"tool_name": "echo"},
    "call_tool": {"result": "echoed"},
    "retrieve_knowledge_base": {"entries": []},
    "history_page": {"items": []},
    "history_search": {"items": []},
    "event_get": {"event_id": "e1", "event_type": "message.received", "source": "api", "time": NOW},
    "event_page": {"items": []},
    "artifact_metadata": {
        "artifact_id": "qa-artifact",
        "name": "a.txt",
        "mime_type": "text/plain",
        "size": 2,
        "created_at": NOW,
    },
    "artifact_read": {"artifact_id": "qa-artifact", "offset": 0, "length": 2, "data_base64": "cWE=", "eof": True},
    "artifact_stream": [{"artifact_id": "qa-artifact", "offset": 0, "data_base64": "cWE=", "eof": True}],
    "artifact_upload_open": {"upload_id": "up1", "max_bytes": 1024, "chunk_max_bytes": 1024},
    "artifact_upload_chunk": {"upload_id": "up1", "received": 10},
    "artifact_upload_finish": {
        "artifact_id": "qa-upload",
        "name": "qa-upload.txt",
        "mime_type": "text/plain",
        "size": 10,
        "created_at": NOW,
    },
    "artifact_upload_abort": {"upload_id": "up1", "received": 0, "aborted": True},
    "state_get": {"found": False},
    "state_set": {"ok": True},
    "state_delete": {"deleted": True},
    "state_list": {"keys": []},
    "storage_get": {"found": False},
    "storage_set": {"ok": True},
    "storage_delete": {"deleted": False},
    "storage_list": {"keys": []},
    "platform_request_action": {"accepted": True},
}


def recording_host(calls: list[tuple[str, dict[str, Any]]], failing: dict[str, AgentAPIException] | None = None):
    """Handlers for every proxy action: record the payload, then answer (or fail) like a host would."""
    failing = failing or {}

    def unary(action: str):
        async def handle(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
            calls.append((action, data))
            if action in failing:
                raise failing[action]
            answer: dict[str, Any] = HOST_ANSWERS[action]
            return answer

        return handle

    def streamed(action: str):
        async def handle(data: dict[str, Any], info: CallInfo) -> AsyncIterator[dict[str, Any]]:
            calls.append((action, data))
            if action in failing:
                raise failing[action]
            for item in HOST_ANSWERS[action]:
                yield item

        return handle

    return {
        action.value: (streamed(action.value) if action in STREAMING_ACTIONS else unary(action.value))
        for action in PROXY_REQUEST_MODELS
    }


async def test_proxy_behaviour_reaches_every_host_api_with_run_id_and_stamped_identity(spawn_runtime, make_context):
    # given a host answering every proxy action, failing call_tool with rate_limited
    calls: list[tuple[str, dict[str, Any]]] = []
    refusal = AgentAPIException.rate_limited("slow down", retry_after=1)
    runtime = await spawn_runtime(handlers=recording_host(calls, failing={"call_tool": refusal}))
    context = make_context("qa:proxy", resources=ALL_RESOURCES, available_apis=ALL_APIS)

    # when the qa runner exercises every API
    results = await runtime.run(context)

    # then every action reached the host once (an upload open twice: one upload finished, one aborted),
    # with the run id and the plugin identity stamped
    assert {action for action, _ in calls} == {action.value for action in PROXY_REQUEST_MODELS}
    assert len(calls) == len(PROXY_REQUEST_MODELS) + 1
    assert [action for action, _ in calls].count("artifact_upload_open") == 2
    for action, payload in calls:
        assert payload["run_id"] == context["run_id"], action
        assert payload["caller_plugin_identity"] == QA_IDENTITY, action
        PROXY_REQUEST_MODELS[Action(action)].model_validate(payload)  # what the host will validate strictly
    # and the runner saw success everywhere except the host's refusal, which arrived with its code
    report = json.loads(results[0]["data"]["message"]["content"])
    assert report.pop("tools.call") == {"ok": False, "code": "rate_limited"}
    assert all(entry == {"ok": True, "code": None} for entry in report.values()), report
    assert results[-1]["type"] == "run.completed"


async def test_proxy_behaviour_without_grants_is_refused_locally_without_reaching_the_host(spawn_runtime, make_context):
    # given a run that was granted nothing
    calls: list[tuple[str, dict[str, Any]]] = []
    runtime = await spawn_runtime(handlers=recording_host(calls))
    context = make_context("qa:proxy")

    # when the qa runner tries every API
    results = await runtime.run(context)

    # then every call failed unauthorized inside the runtime and the host saw none of them
    report = json.loads(results[0]["data"]["message"]["content"])
    assert len(report) == len(PROXY_REQUEST_MODELS)
    assert {entry["code"] for entry in report.values()} == {ErrorCode.UNAUTHORIZED.value}
    assert calls == []


async def test_state_behaviour_round_trips_a_counter_through_the_host(spawn_runtime, make_context):
    # given a host keeping state per (run-independent) conversation key in memory
    store: dict[tuple[str, str], Any] = {}
    seen: list[dict[str, Any]] = []

    async def state_get(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        seen.append(data)
        key = (data["scope"], data["key"])
        return {"found": key in store, "value": store.get(key)}

    async def state_set(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        seen.append(data)
        store[(data["scope"], data["key"])] = data["value"]
        return {"ok": True}

    runtime = await spawn_runtime(handlers={"state_get": state_get, "state_set": state_set})
    grants = {"resources": {"state": {"enabled": True}}, "available_apis": {"state": True}}

    # when two state runs happen one after the other
    first = await runtime.run(make_context("qa:state", **grants))
    second = await runtime.run(make_context("qa:state", **grants))

    # then the counter went 1 then 2, each run reported its state update, and every call was stamped
    assert first[-2]["data"]["message"]["content"] == "QA_STATE:1"
    assert second[-2]["data"]["message"]["content"] == "QA_STATE:2"
    updates = [r["data"] for r in second if r["type"] == "state.updated"]
    assert updates == [{"scope": "conversation", "key": "qa.counter", "value": 2}]
    assert store == {("conversation", "qa.counter"): 2}
    assert {call["caller_plugin_identity"] for call in seen} == {QA_IDENTITY}


SPOOFING_RUNNER = """
from langbot_sdk.protocol import AgentRunResult
from langbot_sdk.proxy import channel_for_run
from langbot_sdk.runner import AgentRunner


class Runner(AgentRunner):
    async def run(self, ctx):
        answer = await channel_for_run(ctx.run_id).call(
            "state_get",
            {"run_id": ctx.run_id, "scope": "conversation", "key": "k", "caller_plugin_identity": "langbot/admin"},
        )
        yield AgentRunResult.message_completed(ctx.run_id, str(answer))
"""


async def test_a_runner_cannot_choose_its_caller_identity(spawn_runtime, tmp_path, make_context):
    # given a runner that writes someone else's identity into its own proxy payload
    write_plugin(tmp_path, "spoofer", code=SPOOFING_RUNNER)
    seen: list[dict[str, Any]] = []

    async def state_get(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        seen.append(data)
        return {"found": False}

    runtime = await spawn_runtime(plugin_dirs=[tmp_path], handlers={"state_get": state_get})

    # when it runs
    results = await runtime.run(make_context("x"), runner_id="plugin:tester/spoofer/main")

    # then the host saw the identity of the plugin that really provides the runner
    assert results[-1]["type"] == "run.completed"
    assert [call["caller_plugin_identity"] for call in seen] == ["tester/spoofer"]


HOST_ERROR_RUNNER = """
from langbot_sdk.protocol import AgentAPIException, AgentRunResult
from langbot_sdk.runner import AgentRunner


class Runner(AgentRunner):
    async def run(self, ctx):
        try:
            await self.run_api(ctx).history.page(limit=5)
        except AgentAPIException as exc:
            error = exc.error
            yield AgentRunResult.message_completed(
                ctx.run_id, f"{type(exc).__name__}|{error.code}|{error.message}|{error.details}"
            )
"""


async def test_a_host_error_reaches_the_runner_as_agent_api_exception(spawn_runtime, tmp_path, make_context):
    # given a host that refuses history pages with not_found and details
    write_plugin(tmp_path, "history-reader", code=HOST_ERROR_RUNNER)

    async def history_page(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        raise AgentAPIException.not_found("no such conversation", conversation="c9")

    runtime = await spawn_runtime(plugin_dirs=[tmp_path], handlers={"history_page": history_page})
    context = make_context("x", available_apis={"history_page": True})

    # when the runner pages history
    results = await runtime.run(context, runner_id="plugin:tester/history-reader/main")

    # then it caught AgentAPIException carrying the host's code, message and details
    text = results[0]["data"]["message"]["content"]
    assert text == "AgentAPIException|not_found|no such conversation|{'conversation': 'c9'}"
