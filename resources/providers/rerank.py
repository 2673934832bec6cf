"""Rerank against a model's provider with the Jina/Cohere-style `POST {base_url}/rerank`
(`{"model", "query", "documents", "top_n"}` → `{"results": [{"index", "relevance_score", "document"?}]}`),
sent with httpx since the `openai` SDK has no rerank call. Failures map exactly as the chat calls' do
(`failures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import httpx

from foundation.outbound import AddressRefusedError, guarded_async_transport
from resources.models import Model, ModelProvider
from resources.providers.clients import provider_private_allowed
from resources.providers.failures import (
    provider_refused,
    provider_timed_out,
    provider_unexpected,
    provider_unreachable,
    response_message,
)


@dataclass(frozen=True, slots=True)
class RankedDocument:
    index: int
    score: float
    document: str | None


@dataclass(frozen=True, slots=True)
class RerankAnswer:
    """The documents best first, at most `top_n`; the usage when the provider sent one."""

    ranked: list[RankedDocument]
    usage: dict[str, Any] | None


async def documents_rerank(
    *, model: Model, query: str, documents: list[str], top_n: int, timeout: float
) -> RerankAnswer:
    provider = model.provider
    body = {"model": model.name, "query": query, "documents": documents, "top_n": top_n}
    answer = await _post_rerank(provider, body, timeout=timeout)
    usage = answer.get("usage")
    return RerankAnswer(
        ranked=_ranked(provider, answer, count=len(documents))[:top_n],
        usage=usage if isinstance(usage, dict) else None,
    )


async def _post_rerank(provider: ModelProvider, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    headers = dict(provider.headers or {})
    if provider.api_key:
        headers["Authorization"] = f"Bearer {provider.api_key}"
    url = provider.base_url.rstrip("/") + "/rerank"
    # Through the outbound address guard, as the SDK's clients (`clients`); no proxies from the environment.
    transport = guarded_async_transport(allow_private=provider_private_allowed(provider))
    try:
        async with httpx.AsyncClient(timeout=timeout, headers=headers, transport=transport, trust_env=False) as client:
            response = await client.post(url, json=body)
    except httpx.TimeoutException:
        raise provider_timed_out(provider) from None
    except (httpx.HTTPError, AddressRefusedError) as exc:
        raise provider_unreachable(provider, exc) from None
    if response.status_code >= 400:
        raise provider_refused(
            provider,
            status=response.status_code,
            provider_message=response_message(response),
            retry_after=response.headers.get("retry-after"),
        )
    try:
        answer = response.json()
    except ValueError:
        raise provider_unexpected(provider, "the rerank answer is not JSON") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
        raise provider_unexpected(provider, "the rerank answer has no results list")
    return answer


def _ranked(provider: ModelProvider, answer: dict[str, Any], *, count: int) -> list[RankedDocument]:
    items: list[RankedDocument] = []
    for raw in answer["results"]:
        index = raw.get("index") if isinstance(raw, dict) else None
        score = raw.get("relevance_score") if isinstance(raw, dict) else None
        if not (
            isinstance(index, int)
            and not isinstance(index, bool)
            and 0 <= index < count
            and isinstance(score, int | float)
            and not isinstance(score, bool)
            and math.isfinite(score)
        ):
            raise provider_unexpected(provider, f"a rerank result without a valid index and score: {raw!r:.200}")
        items.append(RankedDocument(index=index, score=float(score), document=_document_text(raw.get("document"))))
    return sorted(items, key=lambda item: item.score, reverse=True)


def _document_text(document: Any) -> str | None:
    if isinstance(document, str):
        return document
    if isinstance(document, dict) and isinstance(document.get("text"), str):
        return str(document["text"])
    return None
