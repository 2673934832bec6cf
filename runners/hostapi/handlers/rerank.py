"""`invoke_rerank` against the model's provider with the Jina/Cohere-style `POST {base_url}/rerank`
(`{"model", "query", "documents", "top_n"}` → `{"results": [{"index", "relevance_score", "document"?}]}`),
sent with httpx since the `openai` SDK has no rerank call. Failures map exactly as the LLM calls' do
(`runners.hostapi.handlers.model_calls`).
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from foundation.outbound import AddressRefusedError, excerpt, guarded_async_transport
from langbot_sdk.protocol import AgentAPIException, InvokeRerankRequest
from resources.clients import PROVIDER_MESSAGE_CHARS, provider_private_allowed
from resources.models import Model, ModelProvider
from runners.hostapi.handlers.base import ProxyCall
from runners.hostapi.handlers.model_calls import (
    model_of_kind,
    provider_refused,
    provider_timed_out,
    provider_unexpected,
    provider_unreachable,
)

# The cap of issue 16 (§3): it keeps one run's call from tying up a provider with an unbounded request.
MAX_RERANK_DOCUMENTS = 64


async def rerank_invoke(call: ProxyCall) -> dict[str, Any]:
    request: InvokeRerankRequest = call.request
    if len(request.documents) > MAX_RERANK_DOCUMENTS:
        raise AgentAPIException.invalid_argument(
            f"at most {MAX_RERANK_DOCUMENTS} documents can be reranked in one call, got {len(request.documents)}",
            max_documents=MAX_RERANK_DOCUMENTS,
            documents=len(request.documents),
        )
    model = await model_of_kind(call, Model.Kind.RERANK)
    if not request.documents:
        return {"results": []}
    provider = model.provider
    top_n = min(request.top_k or len(request.documents), len(request.documents))
    body = {"model": model.name, "query": request.query, "documents": request.documents, "top_n": top_n}
    timeout = min(float(provider.timeout_seconds), max(call.remaining(), 0.001))
    answer = await _post_rerank(provider, body, timeout=timeout)
    results = _ranked(provider, answer, count=len(request.documents))[:top_n]
    usage = answer.get("usage")
    if isinstance(usage, dict):
        call.session.usage.record(request.model_id, usage)
    return {"results": results}


async def _post_rerank(provider: ModelProvider, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    headers = dict(provider.headers or {})
    if provider.api_key:
        headers["Authorization"] = f"Bearer {provider.api_key}"
    url = provider.base_url.rstrip("/") + "/rerank"
    # Through the outbound address guard, as the SDK's clients (resources.clients); no proxies from the
    # environment.
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
            provider_message=_error_message(response),
            retry_after=response.headers.get("retry-after"),
        )
    try:
        answer = response.json()
    except ValueError:
        raise provider_unexpected(provider, "the rerank answer is not JSON") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
        raise provider_unexpected(provider, "the rerank answer has no results list")
    return answer


def _ranked(provider: ModelProvider, answer: dict[str, Any], *, count: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
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
        item: dict[str, Any] = {"index": index, "score": float(score)}
        document = _document_text(raw.get("document"))
        if document is not None:
            item["document"] = document
        items.append(item)
    return sorted(items, key=lambda item: item["score"], reverse=True)


def _document_text(document: Any) -> str | None:
    if isinstance(document, str):
        return document
    if isinstance(document, dict) and isinstance(document.get("text"), str):
        return str(document["text"])
    return None


def _error_message(response: httpx.Response) -> str:
    """The provider's own words, as a short printable excerpt: an OpenAI-style `{"error": {"message"}}`, a
    `{"message"}` or `{"detail"}` body, else the start of the text (not yet redacted)."""
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
