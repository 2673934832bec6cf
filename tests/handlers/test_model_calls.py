"""`invoke_llm` / `invoke_llm_stream` through the real handlers against a local OpenAI-compatible server:
what the provider receives, what the runner gets back, streams that arrive as they are sent and close at
the provider when the run stops waiting, and every provider failure as a typed error without the key."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from langbot_sdk.protocol import AgentAPIException, InvokeLLMResult, LLMStreamChunk
from runners.models import ProxyCallAudit
from tests.factories import ModelFactory, ModelProviderFactory
from tests.fakes.openai_server import chunk, completion
from tests.handlers.conftest import PROVIDER_KEY

HI = [{"role": "user", "content": "hi"}]


def test_a_reply_comes_back_as_the_provider_gave_it(model_run, fake):
    run = model_run()
    fake.reply(completion("hello there", usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}))
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                     {"type": "image_url", "image_url": "https://example.test/cat.png"},
                                     {"type": "image_base64", "image_base64": "aGk=", "mime_type": "image/jpeg"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "function": {"name": "look", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
    ]  # fmt: skip
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]

    result = InvokeLLMResult.model_validate(
        run.call("invoke_llm", model_id="m1", messages=messages, tools=tools, extra_args={"temperature": 0.2})
    )

    assert result.message.content == "hello there"
    assert result.finish_reason == "stop"
    assert result.usage == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    sent = fake.requests[0]
    assert sent["model"] == "gpt-fake"
    assert sent["temperature"] == 0.2
    assert sent["tools"] == tools
    assert sent["messages"][1]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.test/cat.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,aGk="}},
    ]
    assert sent["messages"][2]["tool_calls"][0]["function"] == {"name": "look", "arguments": "{}"}
    assert sent["messages"][3] == {"role": "tool", "content": "a cat", "tool_call_id": "c1"}
    assert "stream" not in sent


def test_a_reply_with_tool_calls_carries_them(model_run, fake):
    run = model_run()
    calls = [{"id": "c9", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}]
    fake.reply(completion(None, tool_calls=calls, finish_reason="tool_calls"))

    result = InvokeLLMResult.model_validate(run.call("invoke_llm", model_id="m1", messages=HI))

    assert result.finish_reason == "tool_calls"
    assert result.message.tool_calls is not None
    assert (result.message.tool_calls[0].id, result.message.tool_calls[0].function.name) == ("c9", "search")


def _payload(run, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": str(run.run.run_id),
        "caller_plugin_identity": run.identity,
        "run_token": run.built.session.run_token,
        **data,
    }


def test_stream_chunks_reach_the_runner_before_the_provider_finishes(model_run, fake):
    run = model_run()
    fake.stream(
        [
            chunk({"role": "assistant", "content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, finish_reason="stop"),
            chunk(usage={"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}),
        ],
        hold=True,
    )

    async def consume() -> tuple[dict[str, Any], bool, list[dict[str, Any]]]:
        stream = await run.handlers["invoke_llm_stream"](_payload(run, {"model_id": "m1", "messages": HI}), None)
        first = await anext(stream)
        still_holding = not fake._released.is_set()
        fake.release()
        rest = [item async for item in stream]
        await run.audit.flush()
        return first, still_holding, rest

    first, still_holding, rest = asyncio.run(consume())

    assert still_holding
    assert LLMStreamChunk.model_validate(first).delta.content == "Hel"
    chunks = [LLMStreamChunk.model_validate(item) for item in rest]
    assert "".join(c.delta.text() for c in chunks) == "lo"
    assert chunks[-2].finish_reason == "stop"
    assert chunks[-1].usage == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert fake.requests[0]["stream"] is True
    assert fake.requests[0]["stream_options"] == {"include_usage": True}


def test_streamed_tool_call_fragments_reassemble_into_the_calls(model_run, fake):
    run = model_run()
    fake.stream(
        [
            chunk({"role": "assistant", "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "search", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
            chunk({"tool_calls": [
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "fetch", "arguments": '{"u'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"cats"}'}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": '": 1}'}}]}),
            chunk({}, finish_reason="tool_calls"),
            chunk(usage={"prompt_tokens": 4, "completion_tokens": 9, "total_tokens": 13}),
        ]
    )  # fmt: skip

    chunks = [LLMStreamChunk.model_validate(c) for c in run.call("invoke_llm_stream", model_id="m1", messages=HI)]

    calls: dict[int, dict[str, str]] = {}
    for item in chunks:
        for fragment in item.delta.tool_calls or []:
            assert fragment.index is not None
            call = calls.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or fragment.id
            call["name"] = call["name"] or fragment.function.name
            call["arguments"] += fragment.function.arguments
    assert calls == {
        0: {"id": "call_a", "name": "search", "arguments": '{"q": "cats"}'},
        1: {"id": "call_b", "name": "fetch", "arguments": '{"u": 1}'},
    }
    assert [json.loads(c["arguments"]) for c in calls.values()] == [{"q": "cats"}, {"u": 1}]
    assert chunks[-2].finish_reason == "tool_calls"


def test_a_stalled_stream_ends_at_the_run_deadline_and_closes_the_provider_connection(model_run, fake):
    run = model_run()
    fake.stall(chunk({"role": "assistant", "content": "thinking"}))
    run.deadline_at = time.time() + 1.0

    refused = run.refused("invoke_llm_stream", model_id="m1", messages=HI)

    assert refused.code == "deadline_exceeded"
    assert fake.first_chunk_sent.is_set()
    assert fake.disconnected.wait(5)


def test_a_stream_that_stops_sending_for_the_providers_timeout_is_deadline_exceeded(model_run, fake):
    # The run has a minute left; the provider's own timeout (1 s) is what ends the call.
    run = model_run()
    run.workspace.model_providers.update(timeout_seconds=1)
    fake.stall(chunk({"role": "assistant", "content": "thinking"}))
    run.deadline_at = time.time() + 60

    started = time.monotonic()
    refused = run.refused("invoke_llm_stream", model_id="m1", messages=HI)

    assert refused.code == "deadline_exceeded"
    assert "stopped sending for 1 s" in refused.error.message
    assert time.monotonic() - started < 10
    assert fake.disconnected.wait(5)


def test_a_stream_answered_with_plain_json_is_an_unexpected_answer(model_run, fake):
    run = model_run()
    fake.reply(completion("not streamed"))

    refused = run.refused("invoke_llm_stream", model_id="m1", messages=HI)

    assert (refused.code, refused.retryable) == ("runtime_error", False)
    assert "unexpected answer from the model provider" in refused.error.message
    assert "text/event-stream" in refused.error.message


@pytest.mark.parametrize(
    ("status", "headers", "code", "retryable"),
    [
        (429, {"retry-after": "7"}, "rate_limited", True),
        (500, {}, "runtime_error", True),
        (401, {}, "unauthorized", False),
        (403, {}, "unauthorized", False),
        (404, {}, "not_found", False),
        (400, {}, "invalid_argument", False),
        (422, {}, "invalid_argument", False),
    ],
)
@pytest.mark.parametrize("action", ["invoke_llm", "invoke_llm_stream"])
def test_provider_failures_are_typed_and_never_show_the_key(model_run, fake, action, status, headers, code, retryable):
    run = model_run()
    fake.fail(status, f"provider says no (key {PROVIDER_KEY})", headers=headers)

    refused = run.refused(action, model_id="m1", messages=HI)

    assert (refused.code, refused.retryable) == (code, retryable)
    assert "provider says no" in refused.error.message
    assert PROVIDER_KEY not in json.dumps(refused.error.model_dump())
    if status == 429:
        assert refused.error.details["retry_after"] == "7"


def test_an_unreachable_provider_is_a_retryable_runtime_error(model_run):
    run = model_run(base_url="http://127.0.0.1:9/v1")

    refused = run.refused("invoke_llm", model_id="m1", messages=HI)

    assert (refused.code, refused.retryable) == ("runtime_error", True)


def test_an_extra_arg_outside_the_allowed_list_is_refused_by_name(model_run, fake):
    run = model_run()

    refused = run.refused("invoke_llm", model_id="m1", messages=HI, extra_args={"temperature": 1, "n": 3, "model": "x"})

    assert refused.code == "invalid_argument"
    assert "model, n" in refused.error.message
    assert fake.requests == []


def test_a_model_that_is_not_an_llm_is_an_invalid_argument(model_run, fake):
    run = model_run(kind="embedding")

    assert run.refused("invoke_llm", model_id="m1", messages=HI).code == "invalid_argument"
    assert fake.requests == []


def test_a_model_deleted_after_the_run_started_is_not_found(model_run, fake):
    run = model_run()
    run.workspace.models.all().delete()

    assert run.refused("invoke_llm_stream", model_id="m1", messages=HI).code == "not_found"


def test_a_model_of_another_workspace_is_not_in_the_snapshot(host_run, fake):
    other = ModelProviderFactory.create(base_url=fake.base_url)
    ModelFactory.create(workspace=other.workspace, provider=other, model_id="m1")
    run = host_run(config={"model": "m1"}, resource_policy={"allowed_model_ids": ["m1"]})

    assert run.built.session.resources.models == []
    assert run.refused("invoke_llm", model_id="m1", messages=HI).code == "unauthorized"
    assert fake.requests == []


def test_a_consumer_that_stops_reading_closes_the_provider_connection_at_once(model_run, fake):
    run = model_run()
    fake.stall(chunk({"role": "assistant", "content": "thinking"}))

    async def read_one_then_stop() -> dict[str, Any]:
        stream = await run.handlers["invoke_llm_stream"](_payload(run, {"model_id": "m1", "messages": HI}), None)
        first = await anext(stream)
        await stream.aclose()  # what the wire connection does when it stops serving a stream
        await run.audit.flush()
        return first

    first = asyncio.run(read_one_then_stop())

    assert LLMStreamChunk.model_validate(first).delta.content == "thinking"
    assert fake.disconnected.wait(5)


def test_a_stream_the_provider_cuts_off_mid_answer_is_a_retryable_error_not_a_short_answer(model_run, fake):
    run = model_run()
    fake.cut([chunk({"role": "assistant", "content": "The answer is"})])

    error = run.refused("invoke_llm_stream", model_id="m1", messages=HI)

    assert (error.code, error.error.retryable) == ("runtime_error", True)
    assert "before the answer was complete" in error.error.message


def test_a_stream_that_finished_but_lost_its_done_marker_is_kept(model_run, fake):
    run = model_run()
    fake.cut([chunk({"role": "assistant", "content": "Done."}), chunk({}, finish_reason="stop")])

    chunks = [LLMStreamChunk.model_validate(item) for item in run.call("invoke_llm_stream", model_id="m1", messages=HI)]

    assert "".join(c.delta.text() for c in chunks) == "Done."
    assert chunks[-1].finish_reason == "stop"


def test_a_stream_whose_run_ends_closes_the_provider_connection_at_once(model_run, fake):
    # The runtime cannot tell the host it stopped reading; the run ending on the worker (a cancel) must
    # still close the provider's stream, not leave it open until the provider gives up.
    run = model_run()
    fake.stall(chunk({"role": "assistant", "content": "thinking"}))

    async def read_one_then_end_the_run() -> tuple[dict[str, Any], AgentAPIException]:
        stream = await run.handlers["invoke_llm_stream"](_payload(run, {"model_id": "m1", "messages": HI}), None)
        first = await anext(stream)
        run.active = False  # what the worker does when the run ends: its token is no longer active
        with pytest.raises(AgentAPIException) as ended:
            await anext(stream)
        await run.audit.flush()
        return first, ended.value

    first, ended = asyncio.run(read_one_then_end_the_run())

    assert LLMStreamChunk.model_validate(first).delta.content == "thinking"
    assert fake.disconnected.wait(2)
    assert ended.code == "unauthorized"
    assert "ended while its invoke_llm_stream call was in progress" in ended.error.message
    audit = ProxyCallAudit.objects.get(run_id=str(run.run.run_id), action="invoke_llm_stream")
    assert audit.outcome == "unauthorized"


def test_a_call_whose_run_ends_while_it_waits_for_the_provider_is_cut(model_run, fake):
    run = model_run()
    fake.stall(chunk({"role": "assistant", "content": "thinking"}))  # the answer never completes

    async def call_then_end_the_run() -> AgentAPIException:
        call = asyncio.ensure_future(
            run.handlers["invoke_llm"](_payload(run, {"model_id": "m1", "messages": HI}), None)
        )
        assert await asyncio.to_thread(fake.first_chunk_sent.wait, 5)
        run.active = False
        with pytest.raises(AgentAPIException) as ended:
            await asyncio.wait_for(call, 5)
        await run.audit.flush()
        return ended.value

    ended = asyncio.run(call_then_end_the_run())

    assert ended.code == "unauthorized"
    assert fake.disconnected.wait(2)
