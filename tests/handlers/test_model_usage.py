"""The host counts the tokens of every model call itself, per model, on the run's session: from a reply's
`usage`, or from the last chunk of a stream (a stream closed early counts what arrived, marked partial)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from runners.hostapi.usage import ModelUsage, usage_with_host
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, chunk, completion, fake_openai

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@pytest.fixture
def model_run(host_run, fake):
    workspace = WorkspaceFactory.create()
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", name="gpt-fake")
    return host_run(workspace=workspace, config={"model": "m1"}, resource_policy={"allowed_model_ids": ["m1"]})


def test_a_reply_and_a_stream_of_one_model_are_summed_on_the_run(model_run, fake):
    fake.reply(completion("one", usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}))
    fake.stream(
        [
            chunk({"role": "assistant", "content": "two"}),
            chunk({}, finish_reason="stop"),
            chunk(usage={"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}),
        ]
    )

    model_run.call("invoke_llm", model_id="m1", messages=HI)
    model_run.call("invoke_llm_stream", model_id="m1", messages=HI)

    assert model_run.built.session.usage.as_usage() == {
        "models": {"m1": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16, "calls": 2}},
        "prompt_tokens": 11,
        "completion_tokens": 5,
        "total_tokens": 16,
    }


def test_a_stream_the_runner_stopped_reading_counts_as_a_partial_call(model_run, fake):
    fake.stall(chunk({"role": "assistant", "content": "thinking"}))

    async def read_one_then_stop() -> None:
        payload: dict[str, Any] = {
            "run_id": str(model_run.run.run_id),
            "caller_plugin_identity": model_run.identity,
            "run_token": model_run.built.session.run_token,
            "model_id": "m1",
            "messages": HI,
        }
        stream = await model_run.handlers["invoke_llm_stream"](payload, None)
        await anext(stream)
        await stream.aclose()
        await model_run.audit.flush()

    asyncio.run(read_one_then_stop())

    assert model_run.built.session.usage.as_usage()["models"] == {
        "m1": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "calls": 1, "partial": True}
    }


def test_a_refused_call_is_not_counted(model_run, fake):
    model_run.refused("invoke_llm", model_id="m1", messages=HI, extra_args={"model": "other"})

    assert model_run.built.session.usage.as_usage()["models"] == {}


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
