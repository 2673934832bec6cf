"""The one place that builds OpenAI SDK clients from a `ModelProvider`, and the calls made with them.

Error texts built here are shown to operators: they carry the provider's status and message, never its
API key (a provider that echoes part of the key back has it replaced by the mask).

Every client connects through the outbound address guard (`foundation.outbound`): a `base_url` on
a loopback or private address (a self-hosted Ollama or vLLM) is reached only when the operator allowed
private addresses for the provider's workspace or the host, and the address is checked again at every
connection, so a name that changes its answer after the provider was saved is refused as well. The
provider's workspace must be loaded with it in async code (the selectors do).
"""

from __future__ import annotations

import openai

from bindings.selectors import workspace_private_addresses_allowed
from foundation.crypto import SECRET_MASK
from foundation.outbound import (
    AddressRefusedError,
    excerpt,
    guarded_httpx2_async_transport,
    guarded_httpx2_transport,
)
from resources.models import ModelProvider

# The SDK refuses to build a client without a key; an endpoint that needs none ignores this one.
NO_KEY = "no-key"
# The most of a provider's own error message that is passed on (as a printable excerpt).
PROVIDER_MESSAGE_CHARS = 500


class ProviderCallError(Exception):
    """A provider call that failed: `status` is the HTTP status, None when no answer came."""

    def __init__(self, status: int | None, message: str):
        super().__init__(f"HTTP {status}: {message}" if status is not None else message)
        self.status = status
        self.message = message


def provider_private_allowed(provider: ModelProvider) -> bool:
    """Whether the provider's connections may reach private addresses (its workspace's flag or the host's)."""
    return workspace_private_addresses_allowed(workspace=provider.workspace)


def openai_client(provider: ModelProvider, *, max_retries: int | None = None) -> openai.OpenAI:
    # No proxies from the environment: every connection goes through the guarded transport.
    transport = guarded_httpx2_transport(allow_private=provider_private_allowed(provider))
    return openai.OpenAI(
        base_url=provider.base_url,
        api_key=provider.api_key or NO_KEY,
        default_headers=provider.headers or None,
        timeout=float(provider.timeout_seconds),
        max_retries=provider.max_retries if max_retries is None else max_retries,
        http_client=openai.DefaultHttpxClient(transport=transport, trust_env=False),
    )


def async_openai_client(provider: ModelProvider, *, timeout: float | None = None) -> openai.AsyncOpenAI:
    """The client for runs' model calls; `timeout` (seconds) may shorten the provider's to what a run has left."""
    seconds = float(provider.timeout_seconds)
    transport = guarded_httpx2_async_transport(allow_private=provider_private_allowed(provider))
    return openai.AsyncOpenAI(
        base_url=provider.base_url,
        api_key=provider.api_key or NO_KEY,
        default_headers=provider.headers or None,
        timeout=seconds if timeout is None else min(seconds, timeout),
        max_retries=provider.max_retries,
        http_client=openai.DefaultAsyncHttpxClient(transport=transport, trust_env=False),
    )


def provider_models_list(provider: ModelProvider) -> list[str]:
    """The ids of the models the provider lists (`GET {base_url}/models`), tried once: an operator who
    tests a connection wants the answer now, not after the retries."""
    try:
        page = openai_client(provider, max_retries=0).models.list()
        return [model.id for model in page.data]
    except openai.APIStatusError as exc:
        raise ProviderCallError(exc.status_code, redacted(provider, status_message(exc))) from None
    except openai.APITimeoutError:
        raise ProviderCallError(None, f"No answer within {provider.timeout_seconds} s.") from None
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        raise ProviderCallError(None, redacted(provider, f"Could not connect: {cause}")) from None
    except openai.APIError as exc:
        raise ProviderCallError(None, redacted(provider, f"Unexpected answer: {exc.message}")) from None
    except AddressRefusedError as exc:  # the SDK lets what is not its HTTP library's error through
        raise ProviderCallError(None, f"Refused: {exc}") from None


def status_message(exc: openai.APIStatusError) -> str:
    """The provider's own words for a failed call, as a short printable excerpt (not yet redacted)."""
    # The SDK keeps the `error` object of an OpenAI-style error body as `body`.
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return excerpt(body["message"], PROVIDER_MESSAGE_CHARS)
    return excerpt(exc.response.text, PROVIDER_MESSAGE_CHARS) or exc.response.reason_phrase


def redacted(provider: ModelProvider, text: str) -> str:
    """`text` with the provider's key and header values masked."""
    secrets = [provider.api_key or "", *(provider.headers or {}).values()]
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, SECRET_MASK)
    return text
