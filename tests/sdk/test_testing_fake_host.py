"""`langbot_sdk.testing` as a runner author uses it: a context in a line, seeded data, scripted answers,
a run through the real runtime code, typed results and every proxy call it made."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from langbot_sdk import AgentAPIException, AgentRunContext, AgentRunner, AgentRunResult
from langbot_sdk.testing import FakeHost, load_runner, make_context
from tests.sdk.conftest import PLUGINS_DIR, write_plugin


class Chatty(AgentRunner):
    """Reads history and state, streams a model's answer, stores a counter and a file."""

    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        earlier = await api.history.page(before_cursor=str(ctx.context.transcript_seq))
        seen = (await api.state.get("conversation", "seen")).value or 0
        parts = []
        async for chunk in api.models.stream("gpt", [{"role": "user", "content": ctx.input.text}]):
            parts.append(chunk.delta.text())
            yield AgentRunResult.message_delta(ctx.run_id, chunk.delta.text())
        await api.state.set("conversation", "seen", seen + 1)
        await api.storage.set("plugin", "last", "".join(parts).encode())
        yield AgentRunResult.message_completed(ctx.run_id, f"{''.join(parts)} ({len(earlier.items)} earlier)")


def chatty_host(text: str = "hi") -> FakeHost:
    return FakeHost(make_context(text, models=["gpt"], state=["conversation"], storage=["plugin"]))


async def test_a_run_sees_the_seeded_history_and_state_and_leaves_its_writes_on_the_host():
    host = chatty_host()
    host.add_message("user", "earlier question")
    host.add_message("assistant", "earlier answer")
    host.seed_state("conversation", "seen", 4)
    host.models.stream("gpt", ["Hel", "lo"])

    outcome = await host.run(Chatty())

    assert outcome.status == "completed"
    assert outcome.deltas == ["Hel", "lo"]
    assert outcome.text == "Hello (2 earlier)"
    assert [r.sequence for r in outcome.results] == [1, 2, 3, 4]
    assert host.state_value("conversation", "seen") == 5
    assert host.storage_value("plugin", "last") == b"Hello"
    assert [(c.action, c.outcome) for c in host.calls] == [
        ("history_page", "ok"), ("state_get", "ok"), ("invoke_llm_stream", "ok"), ("state_set", "ok"),
        ("storage_set", "ok"),
    ]  # fmt: skip


async def test_a_follow_up_in_the_same_conversation_sees_the_first_runs_reply_and_state():
    host = chatty_host("one")
    host.models.stream("gpt", ["A"])
    await host.run(Chatty())

    outcome = await host.run(Chatty(), host.follow_up("two"))

    assert outcome.text == "A (2 earlier)"  # "one" and the reply "A (0 earlier)"
    assert host.state_value("conversation", "seen") == 2


async def test_a_scripted_model_error_reaches_the_runner_as_the_hosts_error():
    host = chatty_host()
    host.models.fail("gpt", "rate_limited", "slow down", retry_after=1)

    outcome = await host.run(Chatty())

    assert outcome.status == "runner.exception"
    assert outcome.failure is not None
    assert "slow down" in outcome.failure["message"]
    assert host.calls_of("invoke_llm_stream")[0].outcome == "rate_limited"


class Grabby(AgentRunner):
    """Tries what it was not granted, with the raw channel (no SDK-side checks)."""

    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        codes = []
        calls: list[tuple[str, dict[str, Any]]] = [
            ("invoke_llm", {"model_id": "other", "messages": []}),
            ("storage_get", {"area": "workspace", "key": "k"}),
            ("state_get", {"scope": "actor", "key": "k"}),
            ("history_page", {"conversation_id": "someone-else"}),
            ("state_set", {"scope": "conversation", "key": "k", "value": "x" * (300 * 1024)}),
            ("history_page", {"limit": 1000}),
        ]
        for action, data in calls:
            try:
                await api._resolve_channel().call(action, {"run_id": ctx.run_id, **data})
                codes.append("ok")
            except AgentAPIException as exc:
                codes.append(exc.code)
        yield AgentRunResult.message_completed(ctx.run_id, ",".join(codes))


async def test_what_the_run_was_not_granted_is_refused_with_the_hosts_error_codes():
    host = FakeHost(make_context("x", models=["gpt"], state=["conversation"]))

    outcome = await host.run(Grabby())

    assert outcome.text.split(",") == [
        "unauthorized", "unauthorized", "unauthorized", "not_found", "payload_too_large", "ok",
    ]  # fmt: skip
    assert host.calls_of("history_page")[1].arguments["limit"] == 1000  # sent as is, clamped by the host


class ToolUser(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        detail = await api.tools.get_detail("weather")
        result = await api.tools.call("weather", {"city": ctx.input.text})
        yield AgentRunResult.message_completed(ctx.run_id, f"{detail.description}: {result.result}")


async def test_tools_answer_from_a_function_of_the_arguments():
    host = FakeHost(make_context("Oslo", tools=["weather"]))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    host.tools.add("weather", lambda args: {"city": args["city"], "sky": "grey"}, description="Sky", parameters=schema)

    outcome = await host.run(ToolUser())

    assert outcome.text == "Sky: {'city': 'Oslo', 'sky': 'grey'}"
    assert host.calls_of("call_tool")[0].arguments == {"tool_name": "weather", "parameters": {"city": "Oslo"}}


class Reader(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        artifact_id = ctx.config["artifact"]
        meta = await api.artifacts.metadata(artifact_id)
        data = b"".join([chunk.data() async for chunk in api.artifacts.open_stream(artifact_id, chunk_size=4)])
        yield AgentRunResult.artifact_created(ctx.run_id, "upper.txt", "text/plain", content=data.upper())
        yield AgentRunResult.message_completed(ctx.run_id, f"{meta.name}:{data.decode()}")


async def test_artifacts_are_read_in_chunks_and_created_ones_are_kept_by_the_host():
    host = FakeHost(make_context("read it"))
    artifact_id = host.add_artifact(b"hello world", name="a.txt", mime_type="text/plain")
    ctx = host.ctx.model_copy(update={"config": {"artifact": artifact_id}})

    outcome = await host.run(Reader(), ctx)

    assert outcome.text == "a.txt:hello world"
    assert [r.type for r in outcome.results][:1] == ["artifact.created"]
    created = outcome.of_type("artifact.created")[0].data
    assert base64.b64decode(created["content_base64"]) == b"HELLO WORLD"


class Sleeper(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        yield AgentRunResult.message_delta(ctx.run_id, "thinking")
        await asyncio.sleep(30)
        yield AgentRunResult.message_completed(ctx.run_id, "never")


async def test_a_cancelled_run_ends_cancelled_and_a_run_past_its_deadline_ends_timeout():
    host = FakeHost(make_context("x"))

    cancelled = await host.run(Sleeper(), cancel_after=0.05)
    timed_out = await host.run(Sleeper(), make_context("x", deadline_in=0.1))

    assert (cancelled.status, cancelled.deltas) == ("cancelled", ["thinking"])
    assert timed_out.status == "runner.timeout"


class Actor(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        try:
            await api.platform.request_action("message.reaction", {"message_id": "m1"}, {"emoji": "+1"})
            yield AgentRunResult.message_completed(ctx.run_id, "reacted")
        except AgentAPIException as exc:
            # The SDK refuses an action the binding does not allow before asking the host (no status then).
            yield AgentRunResult.message_completed(ctx.run_id, f"{exc.code}:{exc.error.details.get('status')}")


@pytest.mark.parametrize(
    ("allowed", "approval", "reply"),
    [
        (["message.reaction"], False, "reacted"),
        (["message.reaction"], True, "unauthorized:pending_approval"),
        (["message.send"], False, "unauthorized:None"),
    ],
)
async def test_platform_actions_follow_the_bindings_policy_and_approval(allowed: list[str], approval: bool, reply: str):
    host = FakeHost(make_context("x", platform_actions=allowed, require_action_approval=approval))

    outcome = await host.run(Actor())

    assert outcome.text == reply
    assert [r["action"] for r in host.platform.requests] == (["message.reaction"] if "None" not in reply else [])


class Broken(AgentRunner):
    async def run(self, ctx: AgentRunContext) -> AsyncIterator[Any]:
        yield {"type": "message.completed", "data": {"message": {"content": 42}}}


async def test_an_invalid_result_fails_the_run_as_the_runtime_would():
    outcome = await FakeHost(make_context("x")).run(Broken())

    assert outcome.status == "runner.invalid_result"


async def test_a_plugin_directory_loads_as_the_runtime_loads_it_and_runs():
    runner = load_runner(PLUGINS_DIR / "qa-runner")
    host = FakeHost(make_context("hello"))

    outcome = await host.run(runner)

    assert outcome.text == "QA_OK:hello"
    assert host.runner_id == "plugin:langbot/qa-runner/default"


def test_a_deadline_already_passed_is_refused_before_any_host_work():
    ctx = make_context("x", state=["conversation"], deadline_in=-1)

    with pytest.raises(AgentAPIException) as caught:
        asyncio.run(FakeHost(ctx).proxy_call("state_get", {"scope": "conversation", "key": "k"}))

    assert caught.value.code == "deadline_exceeded"
    assert ctx.runtime.deadline_at is not None
    assert time.time() > ctx.runtime.deadline_at


ASKS_A_MODEL = """
from langbot_sdk import AgentAPIException, AgentRunResult
from langbot_sdk.runner import AgentRunner


class Runner(AgentRunner):
    async def run(self, ctx):
        try:
            answer = (await self.run_api(ctx).models.invoke("gpt", [{"role": "user", "content": "hi"}])).message.text()
        except AgentAPIException as exc:
            answer = exc.code
        yield AgentRunResult.message_completed(ctx.run_id, answer)
"""


async def test_a_loaded_plugin_gets_no_more_than_its_manifest_asks_for(tmp_path):
    # The manifest written by write_plugin asks for no permissions: a host would grant it no model.
    plugin = write_plugin(tmp_path, "no-models", code=ASKS_A_MODEL)
    host = FakeHost(make_context("x", models=["gpt"]))
    host.models.reply("gpt", "hello")

    outcome = await host.run(load_runner(plugin))

    assert outcome.text == "unauthorized"
    assert host.calls == []
