"""The host counts the tokens of every model call itself, per model, on the run's session: from a reply's
`usage`, or from the last chunk of a stream (a stream closed early counts what arrived, marked partial)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runners.access.usage import ModelUsage, usage_with_host
from tests.fakes.openai_server import chunk, completion

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def run(model_run):
    return model_run()


def test_a_reply_and_a_stream_of_one_model_are_summed_on_the_run(run, fake):
    fake.reply(completion("one", usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}))
    fake.stream(
        [
            chunk({"role": "assistant", "content": "two"}),
            chunk({}, finish_reason="stop"),
            chunk(usage={"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}),
        ]
    )

    run.call("invoke_llm", model_id="m1", messages=HI)
    run.call("invoke_llm_stream", model_id="m1", messages=HI)

    assert run.built.session.usage.as_usage() == {
        "models": {"m1": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16, "calls": 2}},
        "prompt_tokens": 11,
        "completion_tokens": 5,
        "total_tokens": 16,
    }


def test_a_stream_the_runner_stopped_reading_counts_as_a_partial_call(run, fake):
    fake.stall(chunk({"role": "assistant", "content": "thinking"}))

    async def read_one_then_stop() -> None:
        payload: dict[str, Any] = {
            "run_id": str(run.run.run_id),
            "caller_plugin_identity": run.identity,
            "run_token": run.built.session.run_token,
            "model_id": "m1",
            "messages": HI,
        }
        stream = await run.handlers["invoke_llm_stream"](payload, None)
        await anext(stream)
        await stream.aclose()
        await run.audit.flush()

    asyncio.run(read_one_then_stop())

    assert run.built.session.usage.as_usage()["models"] == {
        "m1": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "calls": 1, "partial": True}
    }


def test_a_refused_call_is_not_counted(run, fake):
    run.refused("invoke_llm", model_id="m1", messages=HI, extra_args={"model": "other"})

    assert run.built.session.usage.as_usage()["models"] == {}


def test_the_runners_usage_is_kept_and_a_host_key_of_its_own_is_replaced():
    host = ModelUsage()
    host.record("m1", {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})

    assert usage_with_host({"total_tokens": 99, "host": "forged"}, host) == {
        "total_tokens": 99,
        "host": {
            "models": {"m1": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4, "calls": 1}},
            "prompt_tokens": 3,
            "completion_tokens": 1,
            "total_tokens": 4,
        },
    }
    assert usage_with_host(None, host)["host"]["total_tokens"] == 4  # type: ignore[index]
    assert usage_with_host(None, ModelUsage()) is None
    assert usage_with_host({"total_tokens": 2, "host": "forged"}, ModelUsage()) == {"total_tokens": 2}
