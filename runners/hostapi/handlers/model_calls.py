"""What every model call shares: the model read from the workspace with its provider, checked for the
kind the action needs, and the provider's failures turned into typed `AgentAPIException`s whose messages
never carry the provider's key — one mapping whether the call went through the `openai` SDK or plain httpx.
"""

from __future__ import annotations

from typing import Any

from foundation.outbound import REFUSED_CODE, AddressRefusedError
from langbot_sdk.authorization import model_kind_check
from langbot_sdk.protocol import AgentAPIException
from resources.clients import redacted
from resources.models import Model, ModelProvider
from resources.selectors import model_with_provider
from runners.hostapi.handlers.base import ProxyCall, not_found


async def model_of_kind(call: ProxyCall, kind: str) -> Model:
    """The call's model with its provider; it may have been deleted since the run started (`not_found`)."""
    model_id = call.request.model_id
    model = await call.db(model_with_provider, workspace_id=call.session.scope.workspace_id, model_id=model_id)
    if model is None:
        raise not_found(f"model {model_id!r} is not configured on this host", model_id=model_id)
    model_kind_check(model_id, model.kind, kind)
    return model


def provider_timed_out(provider: ModelProvider) -> AgentAPIException:
    return AgentAPIException.deadline_exceeded(f"the model provider did not answer within {provider.timeout_seconds} s")


def provider_unreachable(provider: ModelProvider, cause: BaseException) -> AgentAPIException:
    message = redacted(provider, f"could not reach the model provider: {cause}")
    if isinstance(cause, AddressRefusedError):
        # The outbound guard refused the provider's address: trying again cannot help until an operator acts.
        return AgentAPIException.runtime_error(message, retryable=False, reason=REFUSED_CODE)
    return AgentAPIException.runtime_error(message, retryable=True)


def provider_refused(
    provider: ModelProvider, *, status: int, provider_message: str, retry_after: str | None
) -> AgentAPIException:
    """An HTTP error answer: 429 and 5xx are worth retrying, other 4xx are not and carry the provider's words."""
    message = redacted(provider, f"the model provider answered HTTP {status}: {provider_message}")
    if status == 429:
        details: dict[str, Any] = {"status": status}
        if retry_after:
            details["retry_after"] = retry_after
        return AgentAPIException.rate_limited(message, **details)
    if status >= 500:
        return AgentAPIException.runtime_error(message, retryable=True, status=status)
    if status in (401, 403):
        return AgentAPIException.unauthorized(message, status=status)
    if status == 404:
        return AgentAPIException.not_found(message, status=status)
    if status in (400, 422):
        return AgentAPIException.invalid_argument(message, status=status)
    return AgentAPIException.runtime_error(message, retryable=False, status=status)


def provider_unexpected(provider: ModelProvider, what: object) -> AgentAPIException:
    return AgentAPIException.runtime_error(redacted(provider, f"unexpected answer from the model provider: {what}"))
