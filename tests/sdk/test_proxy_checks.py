"""The proxy's local checks (authorization, caps, deadline) and its mapping of calls to wire actions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from langbot_sdk.protocol import (
    AgentAPIError,
    AgentAPIException,
    AgentRunContext,
    HistoryPage,
    StateGetResult,
    limits,
)
from langbot_sdk.proxy import (
    DEFAULT_CALL_TIMEOUT,
    AgentRunAPIProxy,
    bind_run_channel,
    channel_for_run,
    unbind_run_channel,
)
from langbot_sdk.runner import AgentRunner
from langbot_sdk.wire import WireError
from tests.sdk.conftest import build_context


class FakeHost:
    """A HostChannel that records every call and answers from a table (or raises)."""

    def __init__(self, answers: dict[str, Any] | None = None, error: AgentAPIException | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any], float | None]] = []
        self.answers = answers or {}
        self.error = error

    async def call(self, action: str, data: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        self.calls.append((action, data, timeout))
        if self.error is not None:
            raise self.error
        answer: dict[str, Any] = self.answers.get(action, {})
        return answer

    async def _items(self, action: str) -> AsyncIterator[dict[str, Any]]:
        for item in self.answers.get(action, []):
            yield item

    def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        self.calls.append((action, data, timeout))
        return self._items(action)


def proxy_for(host: FakeHost, **context_args: Any) -> AgentRunAPIProxy:
    return AgentRunAPIProxy(AgentRunContext.model_validate(build_context(**context_args)), host)


async def assert_refused(call, code: str) -> AgentAPIError:
    with pytest.raises(AgentAPIException) as caught:
        await call
    assert caught.value.error.code == code
    return caught.value.error


async def test_a_model_outside_the_runs_resources_is_refused_without_a_round_trip():
    host = FakeHost()
    api = proxy_for(host, resources={"models": [{"model_id": "granted"}]})

    await assert_refused(api.models.invoke("other", [{"role": "user", "content": "hi"}]), "unauthorized")

    assert host.calls == []


async def test_a_model_operation_not_granted_is_refused():
    host = FakeHost()
    api = proxy_for(host, resources={"models": [{"model_id": "m", "operations": ["invoke"]}]})

    await assert_refused(api.models.rerank("m", "q", ["a"]), "unauthorized")

    assert host.calls == []


@pytest.mark.parametrize(
    "make_call",
    [
        lambda api: api.history.page(),
        lambda api: api.history.search("q"),
        lambda api: api.events.get("e1"),
        lambda api: api.events.page(),
        lambda api: api.artifacts.metadata("a1"),
        lambda api: api.artifacts.read_range("a1"),
        lambda api: api.state.get("conversation", "k"),
        lambda api: api.storage.get("plugin", "k"),
        lambda api: api.tools.call("t", {}),
        lambda api: api.knowledge.retrieve("kb", "q"),
        lambda api: api.platform.request_action("message.reaction", {}, {}),
    ],
)
async def test_apis_the_context_does_not_open_are_refused_locally(make_call):
    host = FakeHost()
    api = proxy_for(host)

    await assert_refused(make_call(api), "unauthorized")

    assert host.calls == []


async def test_a_storage_area_not_granted_is_refused_even_with_the_storage_api_open():
    host = FakeHost()
    api = proxy_for(host, available_apis={"storage": True}, resources={"storage": {"areas": ["plugin"]}})

    await assert_refused(api.storage.set("workspace", "k", b"v"), "unauthorized")

    assert host.calls == []


async def test_another_conversations_history_needs_cross_conversation_access():
    host = FakeHost(answers={"history_page": {"items": []}})
    api = proxy_for(host, available_apis={"history_page": True}, conversation_id="mine")

    await assert_refused(api.history.page(conversation_id="theirs"), "unauthorized")
    await api.history.page(conversation_id="mine")

    assert [action for action, _, _ in host.calls] == ["history_page"]


async def test_an_expired_deadline_fails_without_sending():
    host = FakeHost()
    api = proxy_for(host, available_apis={"state": True}, deadline_at=time.time() - 0.5)

    await assert_refused(api.state.get("conversation", "k"), "deadline_exceeded")

    assert host.calls == []


async def test_the_call_timeout_is_bounded_by_the_run_deadline():
    # given one run with a deadline 2 s away and one without a deadline
    soon = FakeHost(answers={"state_get": {"found": False}})
    unbounded = FakeHost(answers={"state_get": {"found": False}})
    apis = {"state": True}

    # when each makes a call
    await proxy_for(soon, available_apis=apis, deadline_at=time.time() + 2).state.get("conversation", "k")
    await proxy_for(unbounded, available_apis=apis).state.get("conversation", "k")

    # then the first call may take at most the remaining time, the second the default
    (_, _, soon_timeout), (_, _, default_timeout) = soon.calls[0], unbounded.calls[0]
    assert soon_timeout is not None
    assert 0 < soon_timeout <= 2
    assert default_timeout == DEFAULT_CALL_TIMEOUT


async def test_oversize_page_sizes_and_reads_are_clamped_to_the_caps():
    host = FakeHost(
        answers={
            "history_page": {"items": []},
            "artifact_read": {"artifact_id": "a", "offset": 0, "length": 0, "data_base64": "", "eof": True},
            "state_list": {"keys": []},
        }
    )
    apis = {"history_page": True, "artifact_read": True, "state": True}
    api = proxy_for(host, available_apis=apis)

    await api.history.page(limit=10_000)
    await api.artifacts.read_range("a", 0, 1024 * 1024 * 1024)
    await api.state.list("conversation", limit=5000)

    sent = {action: data for action, data, _ in host.calls}
    assert sent["history_page"]["limit"] == limits.HISTORY_PAGE_MAX
    assert sent["artifact_read"]["length"] == limits.ARTIFACT_READ_MAX_BYTES
    assert sent["state_list"]["limit"] == limits.STATE_LIST_MAX_KEYS


async def test_values_over_the_caps_are_refused_as_payload_too_large():
    host = FakeHost()
    api = proxy_for(host, available_apis={"state": True, "storage": True}, resources={"storage": {"areas": ["plugin"]}})

    await assert_refused(
        api.state.set("conversation", "k", "x" * (limits.STATE_VALUE_MAX_BYTES + 1)), "payload_too_large"
    )
    await assert_refused(
        api.storage.set("plugin", "k", b"x" * (limits.STORAGE_VALUE_MAX_BYTES + 1)), "payload_too_large"
    )

    assert host.calls == []


async def test_invalid_arguments_are_refused_before_sending():
    host = FakeHost()
    api = proxy_for(host, available_apis={"state": True})

    await assert_refused(api.state.get("not-a-scope", "k"), "invalid_argument")

    assert host.calls == []


async def test_every_payload_carries_the_run_id_and_answers_become_typed_results():
    host = FakeHost(answers={"history_page": {"items": [], "has_more": True}, "state_get": {"found": True, "value": 4}})
    api = proxy_for(host, run_id="run-42", available_apis={"history_page": True, "state": True})

    page = await api.history.page(limit=3)
    value = await api.state.get("conversation", "k")

    assert isinstance(page, HistoryPage)
    assert page.has_more
    assert isinstance(value, StateGetResult)
    assert value.value == 4
    assert [data["run_id"] for _, data, _ in host.calls] == ["run-42", "run-42"]


async def test_a_host_error_is_raised_as_agent_api_exception_with_the_hosts_error():
    refusal = WireError(AgentAPIError(code="rate_limited", message="later", retryable=True, details={"s": 1}))
    api = proxy_for(FakeHost(error=refusal), available_apis={"state": True})

    error = await assert_refused(api.state.get("conversation", "k"), "rate_limited")

    assert error == refusal.error


async def test_streams_yield_typed_chunks():
    host = FakeHost(answers={"invoke_llm_stream": [{"delta": {"role": "assistant", "content": "a"}}] * 3})
    api = proxy_for(host, resources={"models": [{"model_id": "m"}]})

    chunks = [chunk async for chunk in api.models.stream("m", [{"role": "user", "content": "hi"}])]

    assert [chunk.delta.content for chunk in chunks] == ["a", "a", "a"]
    assert host.calls[0][0] == "invoke_llm_stream"


class StateRunner(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[Any]:
        yield await self.run_api(ctx).state.get("conversation", "k")


async def test_run_api_uses_the_channel_bound_to_each_concurrent_run():
    # given one runner instance and two runs bound to different host channels in their own tasks
    runner = StateRunner()
    hosts = {run_id: FakeHost(answers={"state_get": {"found": True, "value": run_id}}) for run_id in ("r1", "r2")}

    async def run(run_id: str) -> list[Any]:
        ctx = AgentRunContext.model_validate(build_context(run_id=run_id, available_apis={"state": True}))
        bind_run_channel(run_id, hosts[run_id])
        try:
            await asyncio.sleep(0)
            return [item async for item in runner.run(ctx)]
        finally:
            unbind_run_channel(run_id, hosts[run_id])

    # when both run at once
    first, second = await asyncio.gather(run("r1"), run("r2"))

    # then each run's calls went to its own host
    assert first[0].value == "r1"
    assert second[0].value == "r2"
    assert [len(host.calls) for host in hosts.values()] == [1, 1]


async def test_run_api_outside_an_active_run_fails_cleanly():
    ctx = AgentRunContext.model_validate(build_context(run_id="gone", available_apis={"state": True}))

    await assert_refused(StateRunner().run_api(ctx).state.get("conversation", "k"), "runtime_error")


async def test_run_api_for_another_runs_id_is_unauthorized_and_reaches_no_host():
    # given a run bound to its host channel, and a copy of its context naming another run
    host = FakeHost(answers={"state_get": {"found": True, "value": "other"}})
    own = AgentRunContext.model_validate(build_context(run_id="mine", available_apis={"state": True}))
    other = own.model_copy(update={"run_id": "theirs"})
    bind_run_channel("mine", host)
    try:
        # when the runner asks for the proxy of the other run
        call = StateRunner().run_api(other).state.get("conversation", "k")
        # then the SDK refuses, and nothing is sent anywhere
        await assert_refused(call, "unauthorized")
        assert channel_for_run("theirs") is None
    finally:
        unbind_run_channel("mine", host)
    assert host.calls == []


async def test_a_task_started_by_a_run_keeps_that_runs_channel_and_no_other():
    # Tasks a runner starts inherit the run's context; other tasks never see the channel.
    host = FakeHost(answers={})
    seen: dict[str, Any] = {}

    async def outsider() -> None:
        seen["outsider"] = channel_for_run("mine")

    async def run() -> None:
        bind_run_channel("mine", host)
        try:
            seen["child"] = await asyncio.create_task(_channel_of("mine"))
        finally:
            unbind_run_channel("mine", host)

    await asyncio.gather(run(), outsider())
    assert seen == {"child": host, "outsider": None}


async def _channel_of(run_id: str) -> Any:
    return channel_for_run(run_id)
