"""The one place that builds OpenAI SDK clients from a `ModelProvider`, and keeps them for runs' calls.

Every client connects through the outbound address guard (`foundation.outbound`): a `base_url` on
a loopback or private address (a self-hosted Ollama or vLLM) is reached only when the operator allowed
private addresses for the provider's workspace or the host, and the address is checked again at every
connection, so a name that changes its answer after the provider was saved is refused as well. The
provider's workspace must be loaded with it in async code (the selectors do).

Runs' calls reuse one client per provider and event loop (`provider_client`): building an `AsyncOpenAI`
loads the CA bundle into a new SSL context, about 20 ms on the 2-core development machine, which every
call paid before (bench/model_proxy.py); a kept client also keeps its connections to the provider alive
between calls.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai

from bindings.selectors import workspace_private_addresses_allowed
from foundation.outbound import AddressRefusedError, guarded_httpx2_async_transport, guarded_httpx2_transport
from foundation.tracing import http_event_hooks
from resources.models import ModelProvider
from resources.providers.failures import call_failure

# The SDK refuses to build a client without a key; an endpoint that needs none ignores this one.
NO_KEY = "no-key"


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
    """A new async client; `timeout` (seconds) may shorten the provider's to what a caller has left."""
    seconds = float(provider.timeout_seconds)
    transport = guarded_httpx2_async_transport(allow_private=provider_private_allowed(provider))
    return openai.AsyncOpenAI(
        base_url=provider.base_url,
        api_key=provider.api_key or NO_KEY,
        default_headers=provider.headers or None,
        timeout=seconds if timeout is None else min(seconds, timeout),
        max_retries=provider.max_retries,
        # Traced, each request carries its span as `traceparent` (the httpx instrumentation does not reach httpx2).
        http_client=openai.DefaultAsyncHttpxClient(
            transport=transport, trust_env=False, event_hooks=http_event_hooks()
        ),
    )


_ClientKey = tuple[Any, ...]
_clients: dict[asyncio.AbstractEventLoop, dict[_ClientKey, openai.AsyncOpenAI]] = {}


def provider_client(provider: ModelProvider) -> openai.AsyncOpenAI:
    """The running loop's client for the provider as it is configured now. An edited provider gets a new
    client (streams in flight keep the old one until they end); clients of closed loops are dropped."""
    loop = asyncio.get_running_loop()
    for other in list(_clients):
        if other.is_closed():
            _clients.pop(other, None)
    clients = _clients.setdefault(loop, {})
    key = (
        provider.pk,
        provider.base_url,
        provider.api_key,
        json.dumps(provider.headers or {}, sort_keys=True),
        provider.timeout_seconds,
        provider.max_retries,
        # An operator who allows or withdraws private addresses changes which connections are made.
        provider_private_allowed(provider),
    )
    client = clients.get(key)
    if client is None:
        for stale in [other for other in clients if other[0] == provider.pk]:
            clients.pop(stale, None)
        client = clients[key] = async_openai_client(provider)
    return client


def provider_models_list(provider: ModelProvider) -> list[str]:
    """The ids of the models the provider lists (`GET {base_url}/models`), tried once: an operator who
    tests a connection wants the answer now, not after the retries. Raises `ProviderCallError`."""
    try:
        page = openai_client(provider, max_retries=0).models.list()
    except (openai.APIError, AddressRefusedError) as exc:  # the SDK lets the guard's refusal through as is
        raise call_failure(provider, exc) from None
    return [model.id for model in page.data]
