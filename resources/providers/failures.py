"""What went wrong at a model provider, in the words its callers show: typed `AgentAPIException`s for a
run's calls (one mapping whether the call went through the `openai` SDK or plain httpx), and
`ProviderCallError`s for operators (the admin's connection test, knowledge ingestion).

No message built here carries the provider's API key or header values: a provider that echoes part of
them back has them replaced by the mask (`redacted`).
"""

from __future__ import annotations

from typing import Any

import httpx
import openai

from foundation.crypto import SECRET_MASK
from foundation.outbound import REFUSED_CODE, AddressRefusedError, excerpt
from langbot_sdk.protocol import AgentAPIException
from resources.models import ModelProvider

# The most of a provider's own error message that is passed on (as a printable excerpt).
PROVIDER_MESSAGE_CHARS = 500


class ProviderCallError(Exception):
    """A provider call that failed, as an operator sees it: `status` is the HTTP status, None when no
    answer came."""

    def __init__(self, status: int | None, message: str):
        super().__init__(f"HTTP {status}: {message}" if status is not None else message)
        self.status = status
        self.message = message


def redacted(provider: ModelProvider, text: str) -> str:
    """`text` with the provider's key and header values masked."""
    secrets = [provider.api_key or "", *(provider.headers or {}).values()]
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, SECRET_MASK)
    return text


def status_message(exc: openai.APIStatusError) -> str:
    """The provider's own words for a failed SDK call, as a short printable excerpt (not yet redacted)."""
    # The SDK keeps the `error` object of an OpenAI-style error body as `body`.
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return excerpt(body["message"], PROVIDER_MESSAGE_CHARS)
    return excerpt(exc.response.text, PROVIDER_MESSAGE_CHARS) or exc.response.reason_phrase


def response_message(response: httpx.Response) -> str:
    """The provider's own words in an httpx error answer, as a short printable excerpt: an OpenAI-style
    `{"error": {"message"}}`, a `{"message"}` or `{"detail"}` body, else the start of the text (not yet
    redacted)."""
    return excerpt(_provider_words(response), PROVIDER_MESSAGE_CHARS)


def _provider_words(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for name in ("error", "message", "detail"):
            if isinstance(body.get(name), str):
                return str(body[name])
    return response.text or response.reason_phrase


# A run's calls: typed errors the runner can act on (retry, back off, give up).


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


def provider_error(provider: ModelProvider, exc: openai.APIError) -> AgentAPIException:
    """The SDK's failure as a run's caller sees it."""
    if isinstance(exc, openai.APITimeoutError):
        return provider_timed_out(provider)
    if isinstance(exc, openai.APIConnectionError):
        return provider_unreachable(provider, exc.__cause__ or exc)
    if isinstance(exc, openai.APIStatusError):
        return provider_refused(
            provider,
            status=exc.status_code,
            provider_message=status_message(exc),
            retry_after=exc.response.headers.get("retry-after"),
        )
    return provider_unexpected(provider, exc)


# Operators' calls: the status and the provider's words, for a form or a document's failure.


def call_failure(provider: ModelProvider, exc: openai.APIError | AddressRefusedError) -> ProviderCallError:
    """The SDK's failure (or the outbound guard's refusal) as an operator sees it."""
    if isinstance(exc, AddressRefusedError):
        return ProviderCallError(None, f"Refused: {exc}")
    if isinstance(exc, openai.APIStatusError):
        return ProviderCallError(exc.status_code, redacted(provider, status_message(exc)))
    if isinstance(exc, openai.APITimeoutError):
        return ProviderCallError(None, f"No answer within {provider.timeout_seconds} s.")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderCallError(None, redacted(provider, f"Could not connect: {exc.__cause__ or exc}"))
    return ProviderCallError(None, redacted(provider, f"Unexpected answer: {exc.message}"))
