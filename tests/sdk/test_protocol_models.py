"""Direction rules of the protocol models: what the host sends is read leniently, what runners send
is checked strictly; plus the run context, records and API errors."""

import pickle

import pytest
from pydantic import ValidationError

from langbot_sdk.protocol import (
    AgentAPIError,
    AgentAPIException,
    AgentRunContext,
    AgentRunRequest,
    ArtifactReadResult,
    ErrorCode,
    HistoryPage,
    HostModel,
    RunnerModel,
    StateGetResult,
    StorageGetResult,
)


def run_context_dict(**overrides):
    context = {
        "run_id": "run-1",
        "trigger": {"type": "message.received", "source": "api", "timestamp": 1700000000},
        "event": {"event_id": "evt-1", "event_type": "message.received", "source": "api"},
        "conversation": {"conversation_id": "conv-1", "bot_id": "bot-1"},
        "actor": {"actor_type": "user", "actor_id": "u-1", "actor_name": "Ada"},
        "input": {
            "text": "hello",
            "contents": [
                {"type": "text", "text": "hello"},
                {"type": "image_url", "image_url": "https://example.invalid/cat.png"},
            ],
            "attachments": [{"artifact_id": "art-1", "mime_type": "image/png"}],
        },
        "delivery": {"surface": "webui", "supports_streaming": True},
        "resources": {
            "models": [{"model_id": "m-1", "operations": ["invoke", "stream"]}],
            "storage": {"areas": ["plugin"]},
        },
        "context": {
            "conversation_id": "conv-1",
            "latest_cursor": "c-41",
            "has_history_before": True,
            "inline_policy": {"mode": "current_event", "delivered_count": 1},
            "available_apis": {"history_page": True},
        },
        "state": {"conversation": {"turns": 3}},
        "runtime": {"trace_id": "trace-1", "deadline_at": 1700000300.5},
        "config": {"behaviour": "ok"},
    }
    context.update(overrides)
    return context


def test_run_request_from_the_host_parses_into_typed_context():
    request = AgentRunRequest.model_validate(
        {
            "runner_id": "plugin:langbot/qa-runner/default",
            "runner_name": "default",
            "context": run_context_dict(),
        }
    )

    ctx = request.context
    assert ctx.input.contents[1].image_url == "https://example.invalid/cat.png"
    assert ctx.resources.find_model("m-1") is not None
    assert ctx.resources.find_model("m-2") is None
    assert ctx.context.available_apis.history_page is True
    assert ctx.runtime.deadline_at == 1700000300.5
    assert ctx.bootstrap is None


def test_fields_added_by_a_newer_host_are_ignored_by_the_runner():
    raw = run_context_dict(new_top_level={"x": 1})
    raw["event"]["priority"] = "high"
    raw["delivery"]["supports_threads"] = True
    raw["runtime"]["region"] = "eu"

    ctx = AgentRunContext.model_validate(raw)

    assert ctx.event.event_id == "evt-1"
    assert "priority" not in ctx.event.model_dump()
    assert "new_top_level" not in ctx.model_dump()


def test_unknown_content_element_kinds_keep_their_fields():
    raw = run_context_dict()
    raw["input"]["contents"].append({"type": "audio", "audio_url": "https://example.invalid/a.ogg"})

    element = AgentRunContext.model_validate(raw).input.contents[-1]

    assert element.type == "audio"
    assert element.model_dump(exclude_none=True) == {
        "type": "audio",
        "audio_url": "https://example.invalid/a.ogg",
    }


def test_run_context_without_an_event_is_refused():
    raw = run_context_dict()
    del raw["event"]

    with pytest.raises(ValidationError, match="event"):
        AgentRunContext.model_validate(raw)


def test_trigger_source_outside_the_protocol_is_refused():
    raw = run_context_dict(trigger={"type": "message.received", "source": "carrier-pigeon"})

    with pytest.raises(ValidationError, match="source"):
        AgentRunContext.model_validate(raw)


def test_remaining_seconds_counts_down_to_the_deadline_and_stops_at_zero():
    runtime = AgentRunContext.model_validate(run_context_dict()).runtime

    assert runtime.remaining_seconds(now=1700000200.5) == 100.0
    assert runtime.remaining_seconds(now=1700000400.0) == 0.0


def test_host_and_runner_bases_differ_in_how_they_treat_unknown_fields():
    class FromHost(HostModel):
        a: int

    class FromRunner(RunnerModel):
        a: int

    assert FromHost.model_validate({"a": 1, "b": 2}).a == 1
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        FromRunner.model_validate({"a": 1, "b": 2})


def test_history_page_from_a_newer_host_parses():
    page = HistoryPage.model_validate(
        {
            "items": [
                {
                    "item_id": "t-1",
                    "cursor": "c-1",
                    "conversation_id": "conv-1",
                    "role": "user",
                    "content": "hi",
                    "created_at": "2025-01-01T00:00:00Z",
                    "sentiment": "positive",
                }
            ],
            "next_cursor": None,
            "has_more": False,
            "total": 1,
        }
    )

    assert page.items[0].content == "hi"
    assert page.items[0].created_at.tzinfo is not None


def test_artifact_and_storage_reads_decode_their_bytes():
    read = ArtifactReadResult(artifact_id="a", offset=0, length=2, data_base64="aGk=", eof=True)
    stored = StorageGetResult(found=True, value_base64="aGk=")
    missing = StorageGetResult(found=False)

    assert read.data() == b"hi"
    assert stored.value() == b"hi"
    assert missing.value() is None
    assert StateGetResult(found=False).value is None


def test_api_exception_reads_as_code_and_message():
    exc = AgentAPIException.of(
        ErrorCode.NOT_FOUND, "conversation conv-9 is not visible", conversation_id="conv-9"
    )

    assert str(exc) == "not_found: conversation conv-9 is not visible"
    assert exc.error == AgentAPIError(
        code="not_found", message="conversation conv-9 is not visible", details={"conversation_id": "conv-9"}
    )


def test_only_rate_limits_are_retryable_by_default():
    assert AgentAPIException.rate_limited("slow down").retryable is True
    assert AgentAPIException.runtime_error("model down").retryable is False
    assert AgentAPIException.runtime_error("model down", retryable=True).retryable is True


def test_constructing_an_error_with_an_unknown_code_is_a_mistake():
    with pytest.raises(ValueError, match="forbidden"):
        AgentAPIException.of("forbidden", "nope")


def test_error_from_a_newer_host_with_an_unknown_code_still_parses():
    exc = AgentAPIException.from_error(
        {"code": "quota_exhausted", "message": "monthly quota", "retryable": False}
    )

    assert exc.code == "quota_exhausted"
    assert exc.error.known_code is None


def test_api_exception_survives_pickling():
    exc = AgentAPIException.invalid_argument("limit too large", limit=500)

    restored = pickle.loads(pickle.dumps(exc))

    assert restored.error == exc.error
