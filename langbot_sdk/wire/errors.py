"""The exception the wire raises to its callers, and the few errors the wire itself produces.

What belongs here: WireError (an AgentAPIException, so runner code that catches the proxy's exception
also catches wire failures) and constructors for the wire's own failure modes.
"""

from __future__ import annotations

from typing import Any

from langbot_sdk.protocol import AgentAPIError, AgentAPIException, ErrorCode


class WireError(AgentAPIException):
    """A call or stream failed: the peer answered code 1, or the wire failed locally (closed
    connection, timeout, frame over the cap). `.error` is the AgentAPIError."""

    @classmethod
    def from_error_data(cls, data: dict[str, Any], message: str) -> WireError:
        """Rebuild the peer's error from an error frame's `data`; a peer that sent no usable error
        object still yields a runtime_error carrying its message."""
        raw = data.get("error")
        if isinstance(raw, dict):
            try:
                return cls(AgentAPIError.model_validate(raw))
            except ValueError:
                pass
        return cls(AgentAPIError(code=ErrorCode.RUNTIME_ERROR, message=message or "peer reported an error"))


def connection_closed_error() -> WireError:
    # Retryable: the call never got an answer, so repeating it on a new connection is meaningful.
    return WireError(AgentAPIError(code=ErrorCode.RUNTIME_ERROR, message="connection closed", retryable=True))
