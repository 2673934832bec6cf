"""Steering: a runner that declares the `steering` capability reads messages handed to it while it runs
(`run_input` → `api.inputs`), in the fake host, the real plugin runtime and through plugin isolation. The
runtime answers the host only once the runner took the input, or `accepted: false` when it never will."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from langbot_sdk.protocol import (
    AgentAPIException,
    AgentRunnerCapabilities,
    AgentRunnerManifest,
    AgentRunResult,
)
from langbot_sdk.runner import AgentRunner
from langbot_sdk.runtime.loader import LoadedRunner
from langbot_sdk.testing import FakeHost, make_context
from tests.sdk.conftest import PLUGINS_DIR
from tests.sdk.test_runtime_isolation import ISOLATED


class Listener(AgentRunner):
    """Answers with its input and every message steered into it within `seconds`."""

    def __init__(self, seconds: float = 5.0, wanted: int = 1) -> None:
        self.seconds, self.wanted = seconds, wanted

    async def run(self, ctx):
        api = self.run_api(ctx)
        texts = [ctx.input.text]
        while len(texts) <= self.wanted:
            item = await api.inputs.next(timeout=self.seconds)
            if item is None:
                break
            texts.append(item.input.text)
        yield AgentRunResult.message_completed(ctx.run_id, " + ".join(t or "" for t in texts))


class Deaf(AgentRunner):
    """Never reads steered input."""

    async def run(self, ctx):
        await asyncio.sleep(0.2)
        yield AgentRunResult.message_completed(ctx.run_id, "done")


async def test_a_steered_message_reaches_the_running_run_and_its_answer():
    host = FakeHost(make_context("first"))

    outcome = await host.run(Listener(), steer=["second"])

    assert outcome.text == "first + second"
    [(sent, answer)] = host.steered
    assert (sent.input.text, answer.accepted, answer.reason) == ("second", True, "taken")
    # The conversation shows both messages, as the host's transcript does.
    assert [item.content for item in host._transcript if item.role == "user"] == ["first", "second"]


async def test_messages_arrive_in_the_order_they_were_sent():
    host = FakeHost(make_context("a"))

    outcome = await host.run(Listener(wanted=3), steer=["b", {"text": "c"}, "d"])

    assert outcome.text == "a + b + c + d"


async def test_input_the_runner_never_reads_is_answered_not_accepted_when_the_run_ends():
    host = FakeHost(make_context("hi"))

    outcome = await host.run(Deaf(), steer=["ignored"])

    assert outcome.text == "done"
    [(_, answer)] = host.steered
    assert (answer.accepted, answer.reason) == (False, "ended")


async def test_a_runner_that_does_not_declare_steering_gets_no_input():
    manifest = AgentRunnerManifest(
        id="plugin:tester/plugin/default", name="default", label="r", capabilities=AgentRunnerCapabilities()
    )
    loaded = LoadedRunner(
        manifest=manifest, runner=Listener(seconds=0.3), plugin_identity="tester/plugin", plugin_path=""
    )
    host = FakeHost(make_context("alone"))

    outcome = await host.run(loaded, steer=["lost?"])

    assert outcome.text == "alone"
    [(_, answer)] = host.steered
    assert (answer.accepted, answer.reason) == (False, "not_supported")


async def test_next_returns_none_when_nothing_comes_in_time():
    seen: list[Any] = []

    class Waiter(AgentRunner):
        async def run(self, ctx):
            api = self.run_api(ctx)
            seen.append(await api.inputs.next(timeout=0.05))
            seen.append(api.inputs.pending())
            yield AgentRunResult.message_completed(ctx.run_id, "ok")

    await FakeHost(make_context("x")).run(Waiter())

    assert seen == [None, []]


async def test_inputs_outside_the_run_are_refused():
    ctx = make_context("x")

    with pytest.raises(AgentAPIException) as caught:
        await Listener().run_api(ctx).inputs.next(timeout=0)

    assert caught.value.code == "runtime_error"


def test_a_manifest_may_declare_steering_and_unknown_capabilities_are_still_refused():
    listed = {"id": "plugin:a/b/c", "name": "c", "label": "C"}

    declared = AgentRunnerManifest.model_validate({**listed, "capabilities": {"steering": True}})

    assert declared.capabilities.steering is True
    assert AgentRunnerManifest.model_validate(listed).capabilities.steering is False
    with pytest.raises(ValueError, match="steerable"):
        AgentRunnerManifest.model_validate({**listed, "capabilities": {"steerable": True}})


async def test_the_qa_runner_answers_the_messages_steered_into_it(runtime, make_context):
    context = make_context("qa:steer:5 one")
    run = asyncio.create_task(runtime.run(context))

    answer = await _steer(runtime, context["run_id"], "two")
    results = await asyncio.wait_for(run, timeout=15)

    assert answer == {"accepted": True, "reason": "taken"}
    deltas = [r["data"]["chunk"]["content"] for r in results if r["type"] == "message.delta"]
    assert deltas == ["[got: two] "]
    assert [r["data"]["message"]["content"] for r in results if r["type"] == "message.completed"] == [
        "QA_STEER:one + two"
    ]


async def test_run_input_goes_through_the_supervisor(spawn_runtime, make_context, tmp_path: Path):
    (tmp_path / "qa-runner").symlink_to(PLUGINS_DIR / "qa-runner", target_is_directory=True)
    runtime = await spawn_runtime([tmp_path], extra_args=ISOLATED)
    context = make_context("qa:steer:5 one")
    run = asyncio.create_task(runtime.run(context))

    answer = await _steer(runtime, context["run_id"], "two")
    results = await asyncio.wait_for(run, timeout=15)

    assert answer["accepted"] is True
    assert results[-2]["data"]["message"]["content"] == "QA_STEER:one + two"


async def test_run_input_for_an_unknown_run_is_not_accepted(runtime):
    answer = await runtime.connection.call(
        "run_input", {"run_id": "nope", "event_id": "evt-1", "input": {"text": "hi"}}
    )

    assert answer == {"accepted": False, "reason": "not_active"}


async def test_a_malformed_run_input_is_refused_with_invalid_argument(runtime):
    with pytest.raises(AgentAPIException) as caught:
        await runtime.connection.call("run_input", {"run_id": "r1", "input": {"text": 5}})

    assert caught.value.code == "invalid_argument"


async def _steer(runtime: Any, run_id: str, text: str) -> dict[str, Any]:
    """Send `run_input` once the run is active in the runtime (it may not have started yet)."""
    for _ in range(200):
        answer = await runtime.connection.call(
            "run_input", {"run_id": run_id, "event_id": "evt-steered", "input": {"text": text}}, timeout=15
        )
        if answer.get("reason") != "not_active":
            return answer
        await asyncio.sleep(0.05)
    raise AssertionError("the run never became active")
