"""Runs through a real runtime process: results, ordering, failures, deadlines and cancellation."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from langbot_sdk.protocol import AgentRunResult
from tests.sdk.conftest import write_plugin


def types_of(results: list[dict[str, Any]]) -> list[str]:
    return [result["type"] for result in results]


def assert_well_formed(results: list[dict[str, Any]], run_id: str) -> None:
    """Every result belongs to the run, validates, is numbered 1..n and only the last is terminal."""
    for result in results:
        AgentRunResult.coerce(result)
    assert [result["run_id"] for result in results] == [run_id] * len(results)
    assert [result["sequence"] for result in results] == list(range(1, len(results) + 1))
    assert results[-1]["type"] in {"run.completed", "run.failed"}
    assert not {"run.completed", "run.failed"} & set(types_of(results[:-1]))


async def test_ok_run_replies_with_the_input_and_completes(runtime, make_context):
    # given a qa run with config behaviour ok
    context = make_context("hello there", config={"behaviour": "ok"})

    # when the host runs it
    results = await runtime.run(context)

    # then the runner's reply arrives, then run.completed
    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["message.completed", "run.completed"]
    assert results[0]["data"]["message"]["content"] == "QA_OK:hello there"


async def test_stream_run_sends_ordered_deltas_then_the_joined_message(runtime, make_context):
    # given a stream run of 7 deltas
    context = make_context("qa:stream:7 go")

    # when the host runs it
    results = await runtime.run(context)

    # then 7 deltas arrive in order, then the full text, then run.completed, numbered 1..9
    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["message.delta"] * 7 + ["message.completed", "run.completed"]
    deltas = [result["data"]["chunk"]["content"] for result in results[:7]]
    assert results[7]["data"]["message"]["content"] == "".join(deltas)
    assert len(set(deltas)) == 7


async def test_many_concurrent_runs_over_one_connection_keep_their_own_results(runtime, make_context):
    # given 50 stream runs with different delta counts started at once
    contexts = [make_context(f"qa:stream:{i % 5 + 1} x") for i in range(50)]

    # when they all run concurrently
    all_results = await asyncio.gather(*(runtime.run(context) for context in contexts))

    # then each run got exactly its own results, in order
    for i, (context, results) in enumerate(zip(contexts, all_results, strict=True)):
        assert_well_formed(results, context["run_id"])
        assert types_of(results).count("message.delta") == i % 5 + 1


async def test_a_runner_that_ends_without_a_terminal_result_gets_run_completed(spawn_runtime, tmp_path, make_context):
    # given a runner that yields one message and simply returns, as a dict without run_id
    code = (
        "from langbot_sdk.runner import AgentRunner\n\n"
        "class Runner(AgentRunner):\n"
        "    async def run(self, ctx):\n"
        "        yield {'type': 'message.completed', 'data': {'message': {'role': 'assistant', 'content': 'x'}}}\n"
    )
    write_plugin(tmp_path, "no-terminal", code=code)
    runtime = await spawn_runtime(plugin_dirs=[tmp_path])
    context = make_context("hi")

    # when the host runs it
    results = await runtime.run(context, runner_id="plugin:tester/no-terminal/main")

    # then the runtime stamped the dict and appended run.completed
    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["message.completed", "run.completed"]


async def test_nothing_is_sent_after_a_terminal_result(spawn_runtime, tmp_path, make_context):
    # given a runner that keeps yielding after run.failed
    code = (
        "from langbot_sdk.protocol import AgentRunResult\n"
        "from langbot_sdk.runner import AgentRunner\n\n"
        "class Runner(AgentRunner):\n"
        "    async def run(self, ctx):\n"
        "        yield AgentRunResult.run_failed(ctx.run_id, 'runner.error', 'stop here')\n"
        "        yield AgentRunResult.message_completed(ctx.run_id, 'too late')\n"
        "        yield AgentRunResult.run_completed(ctx.run_id)\n"
    )
    write_plugin(tmp_path, "chatty", code=code)
    runtime = await spawn_runtime(plugin_dirs=[tmp_path])
    context = make_context("hi")

    # when the host runs it
    results = await runtime.run(context, runner_id="plugin:tester/chatty/main")

    # then only the first terminal result arrives
    assert types_of(results) == ["run.failed"]
    assert results[0]["data"]["message"] == "stop here"


async def test_empty_run_completes_without_a_message(runtime, make_context):
    context = make_context("qa:empty")

    results = await runtime.run(context)

    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["run.completed"]


async def test_fail_behaviour_ends_with_the_runners_own_failure(runtime, make_context):
    context = make_context("anything", config={"behaviour": "fail"})

    results = await runtime.run(context)

    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["run.failed"]
    assert results[0]["data"]["code"] == "runner.error"


async def test_echo_context_shows_the_runner_the_context_the_host_sent(runtime, make_context):
    context = make_context("qa:echo_context", config={"behaviour": "ok", "delta_count": 2})

    results = await runtime.run(context)

    echoed = json.loads(results[0]["data"]["message"]["content"])
    assert echoed["run_id"] == context["run_id"]
    assert echoed["event"]["event_id"] == context["event"]["event_id"]
    assert echoed["config"] == {"behaviour": "ok", "delta_count": 2}


async def test_malformed_result_ends_the_run_with_invalid_result(runtime, make_context):
    # given a runner that yields a message.completed whose message is not a message
    context = make_context("qa:malformed")

    # when the host runs it
    results = await runtime.run(context)

    # then the run ends with runner.invalid_result naming the offending type
    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["run.failed"]
    data = results[0]["data"]
    assert data["code"] == "runner.invalid_result"
    assert data["details"]["type"] == "message.completed"
    assert data["details"]["errors"]


async def test_runner_exception_fails_only_that_run(runtime, make_context):
    # given a slow run, a raising run and an ok run at the same time
    slow, raising, ok = make_context("qa:slow:0.3 a"), make_context("qa:raise"), make_context("qa:ok b")

    # when they run concurrently
    slow_results, raising_results, ok_results = await asyncio.gather(
        runtime.run(slow), runtime.run(raising), runtime.run(ok)
    )

    # then the raising run fails with runner.exception and the type; the others finish normally
    assert types_of(raising_results) == ["run.failed"]
    failure = raising_results[0]["data"]
    assert failure["code"] == "runner.exception"
    assert failure["details"]["type"] == "QARunnerError"
    assert slow_results[0]["data"]["message"]["content"] == "QA_SLOW:a"
    assert ok_results[0]["data"]["message"]["content"] == "QA_OK:b"
    assert types_of(slow_results)[-1] == types_of(ok_results)[-1] == "run.completed"


async def test_deadline_expiry_cancels_the_runner_and_fails_retryable_timeout(runtime, make_context):
    # given a run that sleeps 30 s with a deadline 0.3 s away
    context = make_context("qa:slow:30 x", deadline_at=time.time() + 0.3)

    # when the host runs it
    results = await asyncio.wait_for(runtime.run(context), timeout=10)

    # then it ends with runner.timeout, retryable, and nothing else
    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["run.failed"]
    assert results[0]["data"]["code"] == "runner.timeout"
    assert results[0]["data"]["retryable"] is True


async def test_a_deadline_already_past_fails_without_running(runtime, make_context):
    context = make_context("qa:ok hi", deadline_at=time.time() - 1)

    results = await runtime.run(context)

    assert types_of(results) == ["run.failed"]
    assert results[0]["data"]["code"] == "runner.timeout"


async def test_cancel_run_stops_the_runner_and_ends_the_run_cancelled(runtime, make_context):
    # given a run sleeping 30 s, and a second one unrelated to it
    context = make_context("qa:slow:30 x")
    other = make_context("qa:slow:0.2 y")
    collected = asyncio.ensure_future(runtime.run(context))
    other_collected = asyncio.ensure_future(runtime.run(other))

    # when the host cancels the first one (as soon as the runtime knows it)
    for _ in range(200):
        answer = await runtime.connection.call("cancel_run", {"run_id": context["run_id"]})
        if answer["cancelled"]:
            break
        await asyncio.sleep(0.01)
    results = await asyncio.wait_for(collected, timeout=10)

    # then the runtime confirmed, the run ended cancelled, and the other run completed normally
    assert answer == {"cancelled": True}
    assert_well_formed(results, context["run_id"])
    assert types_of(results) == ["run.failed"]
    assert results[0]["data"]["code"] == "cancelled"
    other_results = await other_collected
    assert types_of(other_results) == ["message.completed", "run.completed"]


async def test_cancel_of_an_unknown_run_answers_not_cancelled(runtime):
    answer = await runtime.connection.call("cancel_run", {"run_id": "no-such-run"})

    assert answer == {"cancelled": False}


async def test_invalid_context_fails_the_run_with_validation_errors(runtime, make_context):
    # given a context missing its event and with a malformed delivery
    context = make_context("hi")
    del context["event"]
    context["delivery"] = "not an object"

    # when the host runs it
    results = await runtime.run(context)

    # then one run.failed context.invalid result lists what is wrong (not a wire error)
    assert types_of(results) == ["run.failed"]
    data = results[0]["data"]
    assert results[0]["run_id"] == context["run_id"]
    assert data["code"] == "context.invalid"
    locations = {".".join(error["loc"]) for error in data["details"]["errors"]}
    assert {"context.event", "context.delivery"} <= locations


async def test_unknown_runner_fails_with_runner_not_found(runtime, make_context):
    context = make_context("hi")

    results = await runtime.run(context, runner_id="plugin:nobody/nothing/none")

    assert types_of(results) == ["run.failed"]
    assert results[0]["data"]["code"] == "runner.not_found"


async def test_a_malformed_frame_on_stdin_is_answered_and_the_connection_survives(runtime, make_context):
    # given the host writes garbage straight into the runtime's stdin
    stdin = runtime.process.stdin
    stdin.write(b"this is not json\n")
    stdin.write(b'{"seq_id": 999999, "action": "run_agent", "data": "not an object"}\n')
    await stdin.drain()

    # when the host then runs a normal run
    context = make_context("qa:ok still here")
    results = await runtime.run(context)

    # then the runtime is still serving normally
    assert results[0]["data"]["message"]["content"] == "QA_OK:still here"
    assert runtime.process.returncode is None


STUBBORN_RUNNER = """
import asyncio

from langbot_sdk.runner import AgentRunner


class Runner(AgentRunner):
    async def run(self, ctx):
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                pass  # ignores every cancellation
        yield
"""


async def test_a_runner_ignoring_cancellation_is_abandoned_after_the_grace_period(
    spawn_runtime, tmp_path, make_context
):
    # given a runner that swallows cancellation, in a runtime with a short grace period
    write_plugin(tmp_path, "stubborn", code=STUBBORN_RUNNER)
    runtime = await spawn_runtime(plugin_dirs=[tmp_path], extra_args=["--cancel-grace", "0.2"])
    runner_id = "plugin:tester/stubborn/main"
    cancelled_run, timed_out_run = make_context("a"), make_context("b", deadline_at=time.time() + 0.3)
    collected = asyncio.ensure_future(runtime.run(cancelled_run, runner_id=runner_id))
    timed_out = asyncio.ensure_future(runtime.run(timed_out_run, runner_id=runner_id))

    # when the host cancels the first run and the second reaches its deadline
    for _ in range(200):
        if (await runtime.connection.call("cancel_run", {"run_id": cancelled_run["run_id"]}))["cancelled"]:
            break
        await asyncio.sleep(0.01)
    results = await asyncio.wait_for(collected, timeout=10)
    timeout_results = await asyncio.wait_for(timed_out, timeout=10)

    # then both runs still end, with cancelled and runner.timeout respectively
    assert [(r["type"], r["data"]["code"]) for r in results] == [("run.failed", "cancelled")]
    assert [(r["type"], r["data"]["code"]) for r in timeout_results] == [("run.failed", "runner.timeout")]


async def test_the_runtime_exits_cleanly_when_the_host_closes_the_connection(runtime, make_context):
    # given a runtime with a run in flight
    pending = asyncio.ensure_future(runtime.run(make_context("qa:slow:30 x")))
    for _ in range(1000):
        if (await runtime.connection.call("ping", {}))["runs_active"] == 1:
            break
        await asyncio.sleep(0.01)

    # when the host closes its end
    await runtime.connection.close()

    # then the runtime process exits by itself with status 0
    assert await asyncio.wait_for(runtime.process.wait(), timeout=10) == 0
    pending.cancel()


NOISY_RUNNER = """
import sys

from langbot_sdk.protocol import AgentRunResult
from langbot_sdk.runner import AgentRunner

print("noise at import")


class Runner(AgentRunner):
    async def run(self, ctx):
        print("noise while running")
        sys.stdout.write("more noise\\n")
        yield AgentRunResult.message_completed(ctx.run_id, "clean")
"""


async def test_a_runner_printing_to_stdout_does_not_corrupt_the_wire(spawn_runtime, tmp_path, make_context, caplog):
    # given a plugin that prints at import and while running
    caplog.set_level(logging.DEBUG, logger="langbot_sdk.wire")
    write_plugin(tmp_path, "noisy", code=NOISY_RUNNER)
    runtime = await spawn_runtime(plugin_dirs=[tmp_path])

    # when it runs twice
    first = await runtime.run(make_context("a"), runner_id="plugin:tester/noisy/main")
    second = await runtime.run(make_context("b"), runner_id="plugin:tester/noisy/main")

    # then both runs arrive intact
    assert types_of(first) == types_of(second) == ["message.completed", "run.completed"]
    assert first[0]["data"]["message"]["content"] == "clean"
    # and the host never received a line that was not a frame
    assert not [record for record in caplog.records if "malformed" in record.getMessage()]
