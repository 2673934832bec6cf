"""Errors of the host API (docs/protocol.md, "Errors") and the failure codes of ``run.failed`` results."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self

from pydantic import Field

from langbot_sdk.protocol.base import HostModel


class ErrorCode(StrEnum):
    """Codes the host uses for failed proxy calls."""

    UNAUTHORIZED = "unauthorized"
    NOT_FOUND = "not_found"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    INVALID_ARGUMENT = "invalid_argument"
    RUNTIME_ERROR = "runtime_error"
    # A budget of the run's workspace, bot or actor is used up until its period ends (not retryable: waiting
    # a few seconds changes nothing).
    QUOTA_EXCEEDED = "quota_exceeded"


# Only a rate limit clears by itself; everything else fails the same way when retried unchanged.
_RETRYABLE_BY_DEFAULT = frozenset({ErrorCode.RATE_LIMITED})


class RunFailureCode(StrEnum):
    """Codes of ``run.failed`` results produced by the runtime or the host (runners may use others)."""

    RUNNER_NOT_FOUND = "runner.not_found"
    RUNNER_TIMEOUT = "runner.timeout"
    RUNNER_EXCEPTION = "runner.exception"
    RUNNER_INVALID_RESULT = "runner.invalid_result"
    CONTEXT_INVALID = "context.invalid"
    CANCELLED = "cancelled"
    RUNNER_ERROR = "runner.error"
    QUOTA_EXCEEDED = "quota_exceeded"


class AgentAPIError(HostModel):
    """A failed proxy call as it travels on the wire (``data.error`` of an error response).

    ``code`` stays a plain string so codes added by a newer host still parse; ``known_code`` tells
    whether this SDK knows it.
    """

    code: str
    message: str
    retryable: bool = False
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def known_code(self) -> ErrorCode | None:
        try:
            return ErrorCode(self.code)
        except ValueError:
            return None


class AgentAPIException(Exception):  # noqa: N818 (name pinned by the protocol)
    """Raised by the proxy (and by host handlers) when a call fails; ``.error`` is the wire error."""

    def __init__(self, error: AgentAPIError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error

    def __reduce__(self) -> tuple[type[Self], tuple[AgentAPIError]]:
        return (type(self), (self.error,))

    @property
    def code(self) -> str:
        return self.error.code

    @property
    def retryable(self) -> bool:
        return self.error.retryable

    @classmethod
    def of(
        cls, code: ErrorCode | str, message: str, *, retryable: bool | None = None, **details: Any
    ) -> Self:
        """Build from a known code; an unknown code is a programming error and raises ``ValueError``.

        ``retryable`` defaults to the code's nature (only ``rate_limited`` is retryable by default).
        """
        known = ErrorCode(code)
        if retryable is None:
            retryable = known in _RETRYABLE_BY_DEFAULT
        return cls(AgentAPIError(code=known.value, message=message, retryable=retryable, details=details))

    @classmethod
    def from_error(cls, error: AgentAPIError | dict[str, Any]) -> Self:
        """Rebuild from a wire error (unknown codes are kept as they are)."""
        if not isinstance(error, AgentAPIError):
            error = AgentAPIError.model_validate(error)
        return cls(error)

    @classmethod
    def unauthorized(cls, message: str, **details: Any) -> Self:
        return cls.of(ErrorCode.UNAUTHORIZED, message, **details)

    @classmethod
    def not_found(cls, message: str, **details: Any) -> Self:
        return cls.of(ErrorCode.NOT_FOUND, message, **details)

    @classmethod
    def deadline_exceeded(cls, message: str, **details: Any) -> Self:
        return cls.of(ErrorCode.DEADLINE_EXCEEDED, message, **details)

    @classmethod
    def payload_too_large(cls, message: str, **details: Any) -> Self:
        return cls.of(ErrorCode.PAYLOAD_TOO_LARGE, message, **details)

    @classmethod
    def rate_limited(cls, message: str, **details: Any) -> Self:
        return cls.of(ErrorCode.RATE_LIMITED, message, **details)

    @classmethod
    def invalid_argument(cls, message: str, **details: Any) -> Self:
        return cls.of(ErrorCode.INVALID_ARGUMENT, message, **details)

    @classmethod
    def quota_exceeded(cls, message: str, **details: Any) -> Self:
        return cls.of(ErrorCode.QUOTA_EXCEEDED, message, **details)

    @classmethod
    def runtime_error(cls, message: str, *, retryable: bool | None = None, **details: Any) -> Self:
        return cls.of(ErrorCode.RUNTIME_ERROR, message, retryable=retryable, **details)
