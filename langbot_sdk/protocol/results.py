"""The result stream a runner yields (docs/protocol.md, "Results"): the envelope, its nine stable types and their
typed payloads.

Results travel runner → host and are checked strictly: the envelope and every known payload forbid
unknown fields. Content elements inside messages stay open (see ``ContentElement``). Unknown result
types pass the envelope check and ``validate_result_payload`` returns ``None`` for them — the host
ignores them with a warning, as the protocol requires.
"""

from __future__ import annotations

import base64
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, Field, field_validator, model_validator

from langbot_sdk.protocol.base import RunnerModel
from langbot_sdk.protocol.context import ContentElement, Message, ToolCall
from langbot_sdk.protocol.limits import ARTIFACT_INLINE_MAX_BYTES
from langbot_sdk.protocol.state import StateKey, StateScope, check_state_value, decode_base64


class ResultType(StrEnum):
    MESSAGE_DELTA = "message.delta"
    MESSAGE_COMPLETED = "message.completed"
    TOOL_CALL_STARTED = "tool.call.started"
    TOOL_CALL_COMPLETED = "tool.call.completed"
    ARTIFACT_CREATED = "artifact.created"
    STATE_UPDATED = "state.updated"
    ACTION_REQUESTED = "action.requested"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"


TERMINAL_RESULT_TYPES = frozenset({ResultType.RUN_COMPLETED, ResultType.RUN_FAILED})


class ResultMessage(RunnerModel):
    """A message (or message fragment) produced by a runner; the strict twin of ``Message``."""

    role: str = "assistant"
    content: str | list[ContentElement] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_message(cls, data: Any) -> Any:
        # Let runners hand back a context ``Message`` (e.g. echo a bootstrap message) without converting.
        if isinstance(data, Message):
            return data.model_dump(exclude_unset=True)
        return data

    def text(self) -> str:
        """The plain text of the message (text parts joined by newlines)."""
        return Message.model_validate(self.model_dump()).text()


class MessageDeltaPayload(RunnerModel):
    chunk: ResultMessage


class MessageCompletedPayload(RunnerModel):
    message: ResultMessage


class ToolCallStartedPayload(RunnerModel):
    tool_call_id: str = Field(min_length=1)
    tool_name: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)


class ToolCallCompletedPayload(RunnerModel):
    tool_call_id: str = Field(min_length=1)
    tool_name: str = Field(min_length=1)
    result: Any = None
    error: str | None = None


class ArtifactCreatedPayload(RunnerModel):
    """A new artifact: either inline bytes (``content_base64``, ≤ 1 MiB decoded) or an existing
    ``artifact_id`` (e.g. one the runner uploaded or produced by a tool)."""

    name: str = Field(min_length=1)
    mime_type: str = "application/octet-stream"
    content_base64: str | None = None
    artifact_id: str | None = None
    size: int | None = Field(default=None, ge=0)
    sha256: str | None = None
    description: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.content_base64 is None) == (self.artifact_id is None):
            raise ValueError("artifact.created needs exactly one of content_base64 or artifact_id")
        if self.content_base64 is not None:
            data = decode_base64(self.content_base64, limit=ARTIFACT_INLINE_MAX_BYTES, what="inline artifact")
            if self.size is not None and self.size != len(data):
                raise ValueError(f"artifact size says {self.size} bytes but the content has {len(data)}")
        return self


class StateUpdatedPayload(RunnerModel):
    scope: StateScope
    key: StateKey
    value: Any

    @field_validator("value")
    @classmethod
    def _value_fits(cls, value: Any) -> Any:
        return check_state_value(value)


class ActionRequestedPayload(RunnerModel):
    action: str = Field(min_length=1)
    target: dict[str, Any] = Field(default_factory=dict)
    payload: dict[str, Any] = Field(default_factory=dict)


class RunCompletedPayload(RunnerModel):
    usage: dict[str, Any] | None = None
    """Token usage and similar counters, e.g. ``{"prompt_tokens": 10, "completion_tokens": 5}``."""
    finish_reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class RunFailedPayload(RunnerModel):
    code: str = Field(min_length=1)
    message: str
    retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)


RESULT_PAYLOAD_MODELS: dict[str, type[RunnerModel]] = {
    ResultType.MESSAGE_DELTA: MessageDeltaPayload,
    ResultType.MESSAGE_COMPLETED: MessageCompletedPayload,
    ResultType.TOOL_CALL_STARTED: ToolCallStartedPayload,
    ResultType.TOOL_CALL_COMPLETED: ToolCallCompletedPayload,
    ResultType.ARTIFACT_CREATED: ArtifactCreatedPayload,
    ResultType.STATE_UPDATED: StateUpdatedPayload,
    ResultType.ACTION_REQUESTED: ActionRequestedPayload,
    ResultType.RUN_COMPLETED: RunCompletedPayload,
    ResultType.RUN_FAILED: RunFailedPayload,
}


def validate_result_payload(type_: str, data: dict[str, Any]) -> BaseModel | None:
    """Validate ``data`` against the payload model of ``type_``.

    Returns the typed payload, ``None`` for an unknown type (callers ignore it with a warning), and
    raises ``pydantic.ValidationError`` for a known type with an invalid payload.
    """
    model = RESULT_PAYLOAD_MODELS.get(type_)
    if model is None:
        return None
    return model.model_validate(data)


def _payload_data(payload: BaseModel) -> dict[str, Any]:
    # Only what the caller set goes on the wire, so an explicit None (e.g. a state value) survives
    # while unset optionals do not bloat every event.
    return payload.model_dump(mode="json", exclude_unset=True)


class AgentRunResult(RunnerModel):
    """One event of a runner's result stream."""

    run_id: str = Field(min_length=1)
    type: str = Field(min_length=1)
    data: dict[str, Any] = Field(default_factory=dict)
    sequence: int | None = None
    timestamp: int | None = None

    def typed_payload(self) -> BaseModel | None:
        """The validated payload model, ``None`` for an unknown type; raises on an invalid payload."""
        return validate_result_payload(self.type, self.data)

    @property
    def is_terminal(self) -> bool:
        return self.type in TERMINAL_RESULT_TYPES

    @classmethod
    def coerce(cls, obj: Any, *, check_payload: bool = True) -> AgentRunResult:
        """Accept an ``AgentRunResult`` or a dict of the same shape (runners may yield dicts).

        With ``check_payload`` (default) a known type's payload is validated too, so a malformed result
        fails here with ``pydantic.ValidationError``; anything else raises ``TypeError``.
        """
        if isinstance(obj, AgentRunResult):
            result = obj
        elif isinstance(obj, dict):
            result = cls.model_validate(obj)
        else:
            raise TypeError(f"a runner must yield AgentRunResult or dict, got {type(obj).__name__}")
        if check_payload:
            result.typed_payload()
        return result

    @classmethod
    def _of(cls, run_id: str, type_: ResultType, payload: BaseModel) -> Self:
        return cls(run_id=run_id, type=type_.value, data=_payload_data(payload))

    @classmethod
    def message_delta(
        cls,
        run_id: str,
        content: str | list[ContentElement] | list[dict[str, Any]],
        *,
        role: str = "assistant",
    ) -> Self:
        chunk = ResultMessage.model_validate({"role": role, "content": content})
        return cls._of(run_id, ResultType.MESSAGE_DELTA, MessageDeltaPayload(chunk=chunk))

    @classmethod
    def message_completed(
        cls,
        run_id: str,
        content: str | list[ContentElement] | list[dict[str, Any]] | None,
        *,
        role: str = "assistant",
        **extra: Any,
    ) -> Self:
        """``extra`` sets further message fields: ``name``, ``tool_calls``, ``tool_call_id``."""
        message = ResultMessage.model_validate({"role": role, "content": content, **extra})
        return cls._of(run_id, ResultType.MESSAGE_COMPLETED, MessageCompletedPayload(message=message))

    @classmethod
    def tool_call_started(
        cls, run_id: str, tool_call_id: str, tool_name: str, parameters: dict[str, Any] | None = None
    ) -> Self:
        payload = ToolCallStartedPayload(
            tool_call_id=tool_call_id, tool_name=tool_name, parameters=parameters or {}
        )
        return cls._of(run_id, ResultType.TOOL_CALL_STARTED, payload)

    @classmethod
    def tool_call_completed(
        cls, run_id: str, tool_call_id: str, tool_name: str, result: Any, *, error: str | None = None
    ) -> Self:
        fields: dict[str, Any] = {"tool_call_id": tool_call_id, "tool_name": tool_name, "result": result}
        if error is not None:
            fields["error"] = error
        payload = ToolCallCompletedPayload.model_validate(fields)
        return cls._of(run_id, ResultType.TOOL_CALL_COMPLETED, payload)

    @classmethod
    def artifact_created(
        cls,
        run_id: str,
        name: str,
        mime_type: str = "application/octet-stream",
        *,
        content: bytes | None = None,
        content_base64: str | None = None,
        artifact_id: str | None = None,
        size: int | None = None,
        sha256: str | None = None,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Self:
        """Either ``content`` (raw bytes, encoded here), ``content_base64`` or ``artifact_id``."""
        if content is not None:
            if content_base64 is not None:
                raise ValueError("pass content or content_base64, not both")
            content_base64 = base64.b64encode(content).decode("ascii")
            size = len(content) if size is None else size
        fields: dict[str, Any] = {
            "content_base64": content_base64,
            "artifact_id": artifact_id,
            "size": size,
            "sha256": sha256,
            "description": description,
            "metadata": metadata,
        }
        payload = ArtifactCreatedPayload.model_validate(
            {"name": name, "mime_type": mime_type, **{k: v for k, v in fields.items() if v is not None}}
        )
        return cls._of(run_id, ResultType.ARTIFACT_CREATED, payload)

    @classmethod
    def state_updated(cls, run_id: str, scope: StateScope | str, key: str, value: Any) -> Self:
        payload = StateUpdatedPayload.model_validate({"scope": scope, "key": key, "value": value})
        return cls._of(run_id, ResultType.STATE_UPDATED, payload)

    @classmethod
    def action_requested(
        cls,
        run_id: str,
        action: str,
        target: dict[str, Any] | None = None,
        payload: dict[str, Any] | None = None,
    ) -> Self:
        body = ActionRequestedPayload(action=action, target=target or {}, payload=payload or {})
        return cls._of(run_id, ResultType.ACTION_REQUESTED, body)

    @classmethod
    def run_completed(
        cls,
        run_id: str,
        *,
        usage: dict[str, Any] | None = None,
        finish_reason: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Self:
        fields = {"usage": usage, "finish_reason": finish_reason, "metadata": metadata}
        payload = RunCompletedPayload.model_validate({k: v for k, v in fields.items() if v is not None})
        return cls._of(run_id, ResultType.RUN_COMPLETED, payload)

    @classmethod
    def run_failed(
        cls,
        run_id: str,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> Self:
        payload = RunFailedPayload(code=code, message=message, retryable=retryable, details=details or {})
        return cls._of(run_id, ResultType.RUN_FAILED, payload)
