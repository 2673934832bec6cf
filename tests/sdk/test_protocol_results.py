"""Result stream: factories produce valid typed results, invalid payloads are refused, dicts work."""

import base64

import pytest
from pydantic import ValidationError

from langbot_sdk.protocol import (
    ARTIFACT_INLINE_MAX_BYTES,
    STATE_VALUE_MAX_BYTES,
    ActionRequestedPayload,
    AgentRunResult,
    ArtifactCreatedPayload,
    Message,
    MessageCompletedPayload,
    MessageDeltaPayload,
    ResultType,
    RunCompletedPayload,
    RunFailedPayload,
    RunFailureCode,
    StateUpdatedPayload,
    ToolCallCompletedPayload,
    ToolCallStartedPayload,
    validate_result_payload,
)

FACTORY_CASES = [
    (lambda: AgentRunResult.message_delta("run-1", "hel"), ResultType.MESSAGE_DELTA, MessageDeltaPayload),
    (
        lambda: AgentRunResult.message_completed("run-1", "hello"),
        ResultType.MESSAGE_COMPLETED,
        MessageCompletedPayload,
    ),
    (
        lambda: AgentRunResult.tool_call_started("run-1", "call-1", "search", {"q": "x"}),
        ResultType.TOOL_CALL_STARTED,
        ToolCallStartedPayload,
    ),
    (
        lambda: AgentRunResult.tool_call_completed("run-1", "call-1", "search", {"hits": 2}),
        ResultType.TOOL_CALL_COMPLETED,
        ToolCallCompletedPayload,
    ),
    (
        lambda: AgentRunResult.artifact_created("run-1", "a.txt", "text/plain", content=b"hi"),
        ResultType.ARTIFACT_CREATED,
        ArtifactCreatedPayload,
    ),
    (
        lambda: AgentRunResult.state_updated("run-1", "conversation", "external.session_id", "abc"),
        ResultType.STATE_UPDATED,
        StateUpdatedPayload,
    ),
    (
        lambda: AgentRunResult.action_requested("run-1", "message.edit", {"message_id": "m"}, {"text": "t"}),
        ResultType.ACTION_REQUESTED,
        ActionRequestedPayload,
    ),
    (
        lambda: AgentRunResult.run_completed("run-1", usage={"total_tokens": 3}),
        ResultType.RUN_COMPLETED,
        RunCompletedPayload,
    ),
    (
        lambda: AgentRunResult.run_failed("run-1", RunFailureCode.RUNNER_ERROR, "boom"),
        ResultType.RUN_FAILED,
        RunFailedPayload,
    ),
]


@pytest.mark.parametrize(("make", "result_type", "payload_model"), FACTORY_CASES)
def test_every_factory_produces_a_result_whose_payload_validates(make, result_type, payload_model):
    result = make()

    reparsed = AgentRunResult.coerce(result.model_dump(mode="json"))

    assert reparsed.type == result_type.value
    assert reparsed.run_id == "run-1"
    assert isinstance(reparsed.typed_payload(), payload_model)


def test_factories_cover_every_stable_result_type():
    produced = {make().type for make, _, _ in FACTORY_CASES}

    assert produced == {t.value for t in ResultType}


def test_message_completed_carries_the_text_as_the_spec_example_shows():
    result = AgentRunResult.message_completed("run-1", "hello")

    assert result.data == {"message": {"role": "assistant", "content": "hello"}}


def test_message_delta_accepts_content_parts_as_dicts():
    result = AgentRunResult.message_delta("run-1", [{"type": "text", "text": "hi"}])

    payload = result.typed_payload()
    assert isinstance(payload, MessageDeltaPayload)
    assert payload.chunk.text() == "hi"


def test_a_context_message_can_be_returned_as_the_completed_message():
    bootstrap_message = Message(role="assistant", content="earlier reply")

    payload = MessageCompletedPayload.model_validate({"message": bootstrap_message})

    assert payload.message.content == "earlier reply"


def test_state_update_to_null_keeps_the_null_value():
    result = AgentRunResult.state_updated("run-1", "runner", "cursor", None)

    assert result.data == {"scope": "runner", "key": "cursor", "value": None}


def test_runner_may_yield_a_plain_dict():
    result = AgentRunResult.coerce(
        {
            "run_id": "run-1",
            "type": "message.completed",
            "data": {"message": {"role": "assistant", "content": "x"}},
        }
    )

    assert isinstance(result, AgentRunResult)
    assert result.typed_payload() == MessageCompletedPayload.model_validate(
        {"message": {"role": "assistant", "content": "x"}}
    )


def test_yielding_something_else_than_a_result_or_dict_is_a_type_error():
    with pytest.raises(TypeError, match="AgentRunResult or dict"):
        AgentRunResult.coerce("message.completed")


@pytest.mark.parametrize(
    ("result_type", "data"),
    [
        ("message.completed", {}),
        ("message.completed", {"message": {"role": "assistant", "content": "x", "mood": "happy"}}),
        ("message.delta", {"text": "hel"}),
        ("tool.call.started", {"tool_name": "search"}),
        ("state.updated", {"scope": "galaxy", "key": "k", "value": 1}),
        ("state.updated", {"scope": "conversation", "key": "", "value": 1}),
        ("state.updated", {"scope": "conversation", "key": "k", "value": {1, 2}}),
        ("artifact.created", {"name": "a.txt"}),
        ("artifact.created", {"name": "a.txt", "content_base64": "aGk=", "artifact_id": "art-1"}),
        ("artifact.created", {"name": "a.txt", "content_base64": "not base64!"}),
        ("artifact.created", {"name": "a.txt", "content_base64": "aGk=", "size": 5}),
        ("action.requested", {"target": {}}),
        ("run.failed", {"message": "no code"}),
        ("run.completed", {"usage": {}, "surprise": True}),
    ],
)
def test_invalid_payload_of_a_known_type_is_refused(result_type, data):
    raw = {"run_id": "run-1", "type": result_type, "data": data}

    with pytest.raises(ValidationError):
        AgentRunResult.coerce(raw)


def test_unknown_result_type_passes_the_envelope_and_has_no_typed_payload():
    result = AgentRunResult.coerce({"run_id": "run-1", "type": "thought.shared", "data": {"x": 1}})

    assert result.typed_payload() is None
    assert validate_result_payload("thought.shared", {"x": 1}) is None


def test_result_envelope_rejects_unknown_fields_with_the_field_named():
    with pytest.raises(ValidationError, match="colour"):
        AgentRunResult.coerce({"run_id": "run-1", "type": "run.completed", "data": {}, "colour": "red"})


def test_state_value_over_the_cap_is_refused():
    too_big = "x" * STATE_VALUE_MAX_BYTES

    with pytest.raises(ValidationError, match="limit"):
        AgentRunResult.state_updated("run-1", "conversation", "k", too_big)


def test_inline_artifact_over_the_cap_is_refused():
    content = base64.b64encode(b"\0" * (ARTIFACT_INLINE_MAX_BYTES + 1)).decode()

    with pytest.raises(ValidationError, match="limit"):
        AgentRunResult.artifact_created("run-1", "big.bin", content_base64=content)


def test_artifact_may_reference_an_existing_artifact_instead_of_inline_content():
    result = AgentRunResult.artifact_created("run-1", "report.pdf", "application/pdf", artifact_id="art-9")

    payload = result.typed_payload()
    assert isinstance(payload, ArtifactCreatedPayload)
    assert payload.artifact_id == "art-9"
    assert payload.content_base64 is None


def test_run_failed_carries_code_message_and_retryable():
    result = AgentRunResult.run_failed(
        "run-1", RunFailureCode.RUNNER_TIMEOUT, "too slow", retryable=True, details={"after": 300}
    )

    assert result.data == {
        "code": "runner.timeout",
        "message": "too slow",
        "retryable": True,
        "details": {"after": 300},
    }
    assert result.is_terminal


def test_message_completed_refuses_unknown_message_fields():
    with pytest.raises(ValidationError, match="mood"):
        AgentRunResult.message_completed("run-1", "hi", mood="happy")
