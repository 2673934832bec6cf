"""The external-platform adapter toolkit (`langbot_sdk.external`): stream readers, the failures every
adapter reports, config reads, usage, cancellation and the input's files — against httpx's mock transport."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from langbot_sdk.external import (
    ConversationGoneError,
    ExternalAgentRunner,
    ExternalRunnerError,
    InputFile,
    InputFileContent,
    Platform,
    RunnerConfig,
    SSEEvent,
    artifact_bytes,
    continued_or_restarted,
    id_text,
    input_file_content,
    input_files,
    input_text,
    json_answer,
    json_object,
    json_values,
    launcher_name,
    platform_user,
    read_limited,
    sse_events,
    stop_request,
    stored_text,
    stored_texts,
    streaming_request,
    text_only_input,
    usage_normalized,
)
from langbot_sdk.protocol import AgentAPIException, AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy
from tests.sdk.conftest import build_context


class ChunkStream(httpx.AsyncByteStream):
    """A response body sent in the given pieces; optionally stalls after them; records being closed."""

    def __init__(self, chunks: list[bytes], *, stall: bool = False) -> None:
        self.chunks = chunks
        self.stall = stall
        self.closed = False
        self.sent_all = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        self.sent_all.set()
        if self.stall:
            await asyncio.sleep(3600)

    async def aclose(self) -> None:
        self.closed = True


def client_for(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def response_of(*chunks: bytes) -> httpx.Response:
    return httpx.Response(200, stream=ChunkStream(list(chunks)))


async def collect_sse(*chunks: bytes) -> list[SSEEvent]:
    return [event async for event in sse_events(response_of(*chunks))]


async def collect_json(*chunks: bytes) -> list[Any]:
    return [value async for value in json_values(response_of(*chunks))]


async def failure_of(platform: Platform, response: httpx.Response, **options: Any) -> ExternalRunnerError:
    with pytest.raises(ExternalRunnerError) as caught:
        async with streaming_request(
            platform, "POST", "http://platform.test/run", timeout=5, client=client_for(lambda _: response), **options
        ):
            pass
    return caught.value


# --- SSE --------------------------------------------------------------------------------------------


async def test_sse_events_carry_their_name_data_and_id():
    events = await collect_sse(b'event: message\nid: 7\ndata: {"answer": "hi"}\n\n', b"data: plain\n\n")

    assert events == [SSEEvent("message", '{"answer": "hi"}', "7"), SSEEvent("message", "plain", "7")]
    assert events[0].json() == {"answer": "hi"}


async def test_sse_multi_line_data_joins_with_newlines_and_frames_split_anywhere_still_parse():
    events = await collect_sse(b"data: line one\r\nda", b"ta: line two\r\n", b"\r\nevent: done\ndata:x\n\n")

    assert [(e.event, e.data) for e in events] == [("message", "line one\nline two"), ("done", "x")]


async def test_sse_comments_and_data_less_pings_are_not_events():
    events = await collect_sse(b": keep-alive\n\nevent: ping\n\n", b"data: {}\n\n")

    assert [e.data for e in events] == ["{}"]


async def test_sse_a_last_event_without_its_blank_line_still_arrives():
    events = await collect_sse(b"data: first\n\ndata: last")

    assert [e.data for e in events] == ["first", "last"]


async def test_sse_a_stray_blank_line_after_an_event_with_an_id_is_no_event():
    events = await collect_sse(b"id: 1\ndata: a\n\n\n\n", b"data: b\n\n")

    assert [(e.data, e.id) for e in events] == [("a", "1"), ("b", "1")]


async def test_sse_a_stream_labelled_with_another_content_type_is_still_read():
    response = httpx.Response(200, headers={"content-type": "application/json"}, stream=ChunkStream([b"data: x\n\n"]))

    assert [event.data async for event in sse_events(response)] == ["x"]


# --- JSON values -----------------------------------------------------------------------------------


async def test_json_values_reads_newline_delimited_and_concatenated_values_split_across_chunks():
    values = await collect_json(b'{"type":"begin"}\n{"type":"item","con', b'tent":"a"}{"type":"end"}\n')

    assert values == [{"type": "begin"}, {"type": "item", "content": "a"}, {"type": "end"}]


async def test_json_values_reads_one_pretty_printed_document():
    values = await collect_json(json.dumps({"response": "hello", "n": [1, 2]}, indent=2).encode())

    assert values == [{"response": "hello", "n": [1, 2]}]


async def test_json_values_refuses_text_that_is_not_json():
    with pytest.raises(ValueError, match="not JSON"):
        await collect_json(b'{"ok": 1}\n<html>oops</html>')


# --- HTTP failures ---------------------------------------------------------------------------------


async def test_a_4xx_answer_is_a_non_retryable_http_error_with_the_platforms_message():
    platform = Platform("acme", label="Acme")
    body = {"code": "invalid_param", "message": "Query is required", "status": 400}

    error = await failure_of(platform, httpx.Response(400, json=body))

    assert error.code == "acme.http_error"
    assert error.retryable is False
    assert "Query is required" in error.message
    assert error.details == {"status": 400, "platform_code": "invalid_param"}


async def test_429_is_retryable_and_keeps_retry_after():
    error = await failure_of(
        Platform("acme"), httpx.Response(429, json={"error": {"message": "slow down"}}, headers={"Retry-After": "3"})
    )

    assert (error.code, error.retryable, error.details["retry_after"]) == ("acme.rate_limited", True, "3")
    assert "slow down" in error.message


async def test_5xx_is_retryable_and_a_text_body_is_the_message():
    error = await failure_of(Platform("acme"), httpx.Response(502, text="bad gateway upstream"))

    assert (error.code, error.retryable) == ("acme.unavailable", True)
    assert "bad gateway upstream" in error.message


async def test_a_secret_echoed_by_the_platform_never_reaches_the_message():
    platform = Platform("acme")
    RunnerConfig({"api-key": "app-SECRET-123"}, platform).secret("api-key")

    error = await failure_of(platform, httpx.Response(401, json={"message": "bad key app-SECRET-123"}))

    assert "app-SECRET-123" not in error.message
    assert "***" in error.message


async def test_a_platform_that_stops_sending_times_out_retryably_and_the_stream_is_closed():
    stream = ChunkStream([b"data: {}\n\n"], stall=True)
    client = client_for(lambda _: httpx.Response(200, stream=stream))
    platform = Platform("acme")

    async def read_all() -> None:
        async with streaming_request(platform, "GET", "http://platform.test/", timeout=0.3, client=client) as response:
            async for _ in sse_events(response):
                pass

    with pytest.raises(ExternalRunnerError) as caught:
        await read_all()

    assert (caught.value.code, caught.value.retryable) == ("acme.timeout", True)
    assert caught.value.details == {"timeout": 0.3}
    assert stream.closed


async def test_an_unreachable_platform_is_a_retryable_connection_error():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ExternalRunnerError) as caught:
        async with streaming_request(Platform("acme"), "GET", "http://x.test/", timeout=1, client=client_for(refuse)):
            pass

    assert (caught.value.code, caught.value.retryable) == ("acme.connection_error", True)


async def test_cancelling_the_reader_closes_the_http_stream():
    stream = ChunkStream([b"data: one\n\n"], stall=True)
    client = client_for(lambda _: httpx.Response(200, stream=stream))
    first = asyncio.Event()

    async def read() -> None:
        async with streaming_request(Platform("acme"), "GET", "http://x.test/", timeout=60, client=client) as response:
            async for _ in sse_events(response):
                first.set()

    task = asyncio.create_task(read())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert stream.closed


class HalfAnswer(ExternalAgentRunner):
    platform_name, platform_label = "acme", "Acme"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        yield AgentRunResult.message_delta(ctx.run_id, "par")
        raise platform.stream_error("the model crashed")


def streaming_context(text: str, *, streams: bool = True) -> AgentRunContext:
    context = build_context(text)
    context["delivery"]["supports_streaming"] = streams
    return AgentRunContext.model_validate(context)


async def test_an_external_runner_ends_with_the_failure_its_turn_raised_after_what_it_yielded():
    ctx = streaming_context("hi")

    results = [result async for result in HalfAnswer().run(ctx)]

    assert [result.type for result in results] == ["message.delta", "run.failed"]
    assert results[-1].data["code"] == "acme.error"
    assert results[-1].data["message"] == "Acme reported an error: the model crashed"


class StreamedAnswer(ExternalAgentRunner):
    platform_name = "acme"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        yield AgentRunResult.message_delta(ctx.run_id, "Hel")
        yield AgentRunResult.tool_call_started(ctx.run_id, "call-1", "search", {})
        yield AgentRunResult.message_delta(ctx.run_id, "lo")
        yield AgentRunResult.message_completed(ctx.run_id, "Hello")
        yield AgentRunResult.run_completed(ctx.run_id)


@pytest.mark.parametrize(
    ("streams", "types"),
    [
        (True, ["message.delta", "tool.call.started", "message.delta", "message.completed", "run.completed"]),
        (False, ["tool.call.started", "message.completed", "run.completed"]),
    ],
)
async def test_a_surface_that_cannot_stream_gets_the_reply_once_and_the_other_results(streams, types):
    results = [result async for result in StreamedAnswer().run(streaming_context("hi", streams=streams))]

    assert [result.type for result in results] == types
    assert results[-2].data["message"]["content"] == "Hello"


async def test_a_stop_call_the_platform_does_not_answer_is_logged_and_not_raised(caplog):
    await stop_request(Platform("acme", label="Acme"), "http://127.0.0.1:9/stop", run_id="run-1", timeout=0.5, json={})

    assert "run run-1: the Acme stop call failed: ConnectError" in caplog.text


async def test_run_failed_of_an_error_keeps_code_retryable_and_details():
    error = Platform("acme").timeout(12)

    result = error.to_result("run-1")

    assert result.type == "run.failed"
    assert result.data == {
        "code": "acme.timeout",
        "message": "acme did not finish within 12 seconds",
        "retryable": True,
        "details": {"timeout": 12},
    }


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"code": 0, "data": {}}, None),
        ({"code": "0", "msg": "ok"}, None),
        ({"data": "no code at all"}, None),
        ({"code": 4200, "msg": "bot does not exist"}, ("acme refused the request: bot does not exist", "4200")),
        ({"code": "E1", "message": "", "msg": "nope"}, ("acme refused the request: nope", "E1")),
        ({"code": 7}, ("acme refused the request: code 7", "7")),
    ],
)
def test_an_http_200_answer_with_an_error_code_is_a_refusal_naming_the_code(answer, expected):
    refusal = Platform("acme").refusal(answer, code_key="code", message_keys=("message", "msg"))

    if expected is None:
        assert refusal is None
    else:
        assert refusal is not None
        assert (refusal.code, refusal.retryable) == ("acme.http_error", False)
        assert (refusal.message, refusal.details) == (expected[0], {"platform_code": expected[1]})


async def test_a_whole_json_answer_is_parsed_and_an_oversized_or_malformed_one_is_a_protocol_error():
    platform = Platform("acme", label="Acme")

    assert await json_answer(platform, response_of(b'{"a": ', b"[1, 2]}")) == {"a": [1, 2]}
    with pytest.raises(ExternalRunnerError) as too_large:
        await json_answer(platform, response_of(b'{"a": "', b"x" * 64, b'"}'), max_bytes=32)
    with pytest.raises(ExternalRunnerError) as not_json:
        await json_answer(platform, response_of(b"<html>busy</html>"))

    assert (too_large.value.code, too_large.value.message) == (
        "acme.protocol_error",
        "Acme's answer is larger than 32 bytes",
    )
    assert (not_json.value.code, not_json.value.message) == ("acme.protocol_error", "Acme's answer is not JSON")


async def test_read_limited_stops_at_the_limit():
    assert await read_limited(response_of(b"0123", b"4567", b"89"), 6) == b"012345"
    assert await read_limited(response_of(b"012"), 6) == b"012"


def test_json_object_and_id_text_take_what_platforms_send_leniently():
    assert json_object('{"a": 1}') == json_object(b'{"a": 1}') == json_object({"a": 1}) == {"a": 1}
    assert json_object('"[DONE]"') == json_object("[DONE]") == json_object("") == json_object(None) == {}
    assert json_object(b"\xff") == json_object("[1]") == {}
    assert (id_text("c-1"), id_text(42), id_text(True), id_text(""), id_text(None), id_text(1.5)) == (
        "c-1", "42", "", "", "", "",
    )  # fmt: skip


# --- config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "read", "field"),
    [
        ({}, lambda c: c.url("base-url"), "base-url"),
        ({"base-url": "ftp://x"}, lambda c: c.url("base-url"), "base-url"),
        ({"api-key": "  "}, lambda c: c.secret("api-key"), "api-key"),
        ({"app-type": "robot"}, lambda c: c.choice("app-type", ["chat", "agent"], "chat"), "app-type"),
        ({"timeout": -1}, lambda c: c.seconds("timeout", 30), "timeout"),
        ({"timeout": "soon"}, lambda c: c.seconds("timeout", 30), "timeout"),
        ({"remove-think": "yes"}, lambda c: c.flag("remove-think", False), "remove-think"),
        ({"base-prompt": 3}, lambda c: c.text("base-prompt"), "base-prompt"),
    ],
)
def test_a_missing_or_malformed_config_value_is_config_invalid_naming_the_field(config, read, field):
    with pytest.raises(ExternalRunnerError) as caught:
        read(RunnerConfig(config, Platform("acme")))

    assert caught.value.code == "acme.config_invalid"
    assert caught.value.details == {"field": field}
    assert f"`{field}`" in caught.value.message
    assert caught.value.retryable is False


def test_config_values_are_read_typed_with_defaults():
    config = RunnerConfig(
        {"base-url": "https://api.acme.test/v1/", "timeout": 30, "app-type": "", "flag": True}, Platform("acme")
    )

    assert config.url("base-url") == "https://api.acme.test/v1"
    assert config.seconds("timeout", 10) == 30.0
    assert config.seconds("missing", 10) == 10.0
    assert config.choice("app-type", ["chat", "agent"], "chat") == "chat"
    assert config.flag("flag", False) is True
    assert config.text("nothing", "fallback") == "fallback"


def test_an_optional_url_falls_back_to_its_default_only_when_blank():
    config = RunnerConfig({"api-base": "https://coze.test/", "blank": "  ", "bad": "coze"}, Platform("acme"))

    assert config.optional_url("api-base", "https://default.test") == "https://coze.test"
    assert config.optional_url("blank", "https://default.test") == "https://default.test"
    assert config.optional_url("missing", "https://default.test") == "https://default.test"
    with pytest.raises(ExternalRunnerError) as caught:
        config.optional_url("bad", "https://default.test")
    assert caught.value.details == {"field": "bad"}


# --- usage -----------------------------------------------------------------------------------------


def test_usage_is_normalized_with_a_total_and_the_platforms_extras():
    raw = {"prompt_tokens": 12, "completion_tokens": 3, "total_price": "0.0001", "currency": "USD", "latency": 1.5}

    usage = usage_normalized(raw, source="acme", extra_keys=("total_price", "currency", "latency"))

    assert usage == {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "total_tokens": 15,
        "source": "acme",
        "total_price": "0.0001",
        "currency": "USD",
        "latency": 1.5,
    }


def test_usage_under_other_names_or_absent():
    assert usage_normalized(
        {"input_tokens": 4, "output_tokens": 6}, source="x", prompt_key="input_tokens", completion_key="output_tokens"
    ) == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10, "source": "x"}
    assert usage_normalized({"latency": 2}, source="x") is None
    assert usage_normalized(None, source="x") is None


# --- who and where ---------------------------------------------------------------------------------


def test_the_platform_user_is_the_launcher_else_the_actor_else_the_conversation():
    launched = build_context("")
    launched["conversation"].update(launcher_type="person", launcher_id="123")
    launched["actor"] = {"actor_type": "user", "actor_id": "u-9"}
    acting = build_context("")
    acting["actor"] = {"actor_type": "user", "actor_id": "u-9"}
    anonymous = build_context("", conversation_id="conv-7")

    contexts = [AgentRunContext.model_validate(c) for c in (launched, acting, anonymous)]

    assert [launcher_name(ctx) for ctx in contexts] == ["person_123", None, None]
    assert [platform_user(ctx) for ctx in contexts] == ["person_123", "user_u-9", "langbot_conv-7"]


class StateHost:
    """A host channel answering `state_get` from a dict (or refusing every read)."""

    def __init__(self, values: dict[str, Any], *, refuse: bool = False) -> None:
        self.values = values
        self.refuse = refuse

    async def call(self, action: str, data: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        assert action == "state_get"
        if self.refuse:
            raise AgentAPIException.runtime_error("state store down")
        key = data["key"]
        return {"found": key in self.values, "value": self.values.get(key)}

    def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        raise AssertionError(f"state reads do not stream ({action})")


def state_api(host: StateHost, *, granted: bool = True) -> AgentRunAPIProxy:
    context = build_context("", available_apis={"state": granted}, resources={"state": {"enabled": granted}})
    return AgentRunAPIProxy(AgentRunContext.model_validate(context), host)


async def test_stored_texts_are_the_non_empty_strings_kept_in_conversation_state():
    api = state_api(StateHost({"external.conversation_id": "c-1", "external.session_id": "", "n": 3}))

    assert await stored_texts(api, ["external.conversation_id", "external.session_id", "n", "missing"]) == {
        "external.conversation_id": "c-1"
    }
    assert await stored_text(api, "external.conversation_id") == "c-1"
    assert await stored_text(api, "n") is None


@pytest.mark.parametrize(("granted", "refuse"), [(False, False), (True, True)], ids=["not-granted", "host-refuses"])
async def test_without_state_nothing_is_continued(granted, refuse):
    api = state_api(StateHost({"external.conversation_id": "c-1"}, refuse=refuse), granted=granted)

    assert await stored_texts(api, ["external.conversation_id"]) is None
    assert await stored_text(api, "external.conversation_id") is None


async def test_a_turn_in_a_conversation_the_platform_forgot_is_run_once_more_as_a_new_one():
    ctx = AgentRunContext.model_validate(build_context(""))
    sent: list[str | None] = []

    async def turn(conversation_id: str | None) -> AsyncIterator[AgentRunResult]:
        sent.append(conversation_id)
        if conversation_id == "forgotten":
            raise ConversationGoneError
        yield AgentRunResult.message_delta(ctx.run_id, f"in {conversation_id}")

    forgotten = [r.data async for r in continued_or_restarted(turn, "forgotten", ctx=ctx)]
    known = [r.data async for r in continued_or_restarted(turn, "known", ctx=ctx)]

    assert sent == ["forgotten", None, "known"]
    assert [d["chunk"]["content"] for d in forgotten + known] == ["in None", "in known"]


# --- input -----------------------------------------------------------------------------------------


def test_the_inputs_text_and_files_are_found_in_attachments_and_content_parts():
    context = build_context("")
    context["input"] = {
        "contents": [
            {"type": "text", "text": "look"},
            {"type": "image", "artifact_id": "a-1", "mime_type": "image/png"},
            {"type": "text", "text": "here"},
        ],
        "attachments": [
            {"artifact_id": "a-2", "name": "doc.pdf", "mime_type": "application/pdf"},
            {"artifact_id": "a-1"},
        ],
    }
    ctx = AgentRunContext.model_validate(context)

    assert input_text(ctx) == "look\nhere"
    assert input_files(ctx) == [InputFile("a-2", "doc.pdf", "application/pdf"), InputFile("a-1", None, None)]
    assert text_only_input(ctx, Platform("acme"), "acme takes text only") == "look\nhere"


def test_an_input_without_text_is_refused_by_a_text_only_platform():
    context = build_context("")
    context["input"] = {"contents": [{"type": "image", "artifact_id": "a-1"}]}

    with pytest.raises(ExternalRunnerError) as caught:
        text_only_input(AgentRunContext.model_validate(context), Platform("acme"), "acme takes text only")

    assert (caught.value.code, caught.value.message) == (
        "acme.empty_input",
        "the input has no text; acme takes text only",
    )


class ArtifactHost:
    """A host channel answering the artifact actions for one stored blob."""

    def __init__(self, content: bytes) -> None:
        self.content = content

    async def call(self, action: str, data: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        assert action == "artifact_metadata"
        return {
            "artifact_id": data["artifact_id"],
            "name": "pic.png",
            "mime_type": "image/png",
            "size": len(self.content),
            "created_at": "2025-01-01T00:00:00Z",
        }

    async def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        assert action == "artifact_stream"
        for offset in range(0, len(self.content), 4):
            piece = self.content[offset : offset + 4]
            yield {
                "artifact_id": data["artifact_id"],
                "offset": offset,
                "data_base64": base64.b64encode(piece).decode(),
                "eof": offset + 4 >= len(self.content),
            }


async def test_an_artifact_is_read_whole_through_the_host_and_an_oversized_one_is_refused():
    context = build_context("", available_apis={"artifact_metadata": True, "artifact_read": True})
    api = AgentRunAPIProxy(AgentRunContext.model_validate(context), ArtifactHost(b"0123456789"))

    metadata, content = await artifact_bytes(api, "a-1", max_bytes=100)

    assert (metadata.name, metadata.mime_type, content) == ("pic.png", "image/png", b"0123456789")
    with pytest.raises(ValueError, match="limit is 5"):
        await artifact_bytes(api, "a-1", max_bytes=5)


async def test_an_input_file_is_read_named_and_typed_and_an_unreadable_one_is_input_unavailable():
    context = build_context("", available_apis={"artifact_metadata": True, "artifact_read": True})
    api = AgentRunAPIProxy(AgentRunContext.model_validate(context), ArtifactHost(b"0123456789"))
    platform = Platform("acme")

    named = await input_file_content(api, platform, InputFile("a-1", "cat.png", "image/jpeg"), max_bytes=100)
    unnamed = await input_file_content(api, platform, InputFile("a-1"), max_bytes=100)
    with pytest.raises(ExternalRunnerError) as caught:
        await input_file_content(api, platform, InputFile("a-1"), max_bytes=5)

    assert named == InputFileContent("cat.png", "image/jpeg", b"0123456789")
    assert unnamed == InputFileContent("pic.png", "image/png", b"0123456789")
    assert caught.value.code == "acme.input_unavailable"
    assert "limit is 5" in caught.value.message
