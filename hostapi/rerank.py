"""`invoke_rerank` of a run: the documents capped, the call made through `resources.providers.rerank`
within what the run has left, its usage counted, and the ranking in the protocol's shape."""

from __future__ import annotations

from typing import Any

from hostapi.base import ProxyCall
from hostapi.model_calls import call_timeout, model_of_kind, usage_count
from langbot_sdk.protocol import AgentAPIException, InvokeRerankRequest
from resources.models import Model
from resources.providers.rerank import RankedDocument, documents_rerank

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
    answer = await documents_rerank(
        model=model,
        query=request.query,
        documents=request.documents,
        top_n=min(request.top_k or len(request.documents), len(request.documents)),
        timeout=call_timeout(call, model.provider),
    )
    if answer.usage is not None:
        await usage_count(call, model, answer.usage)
    return {"results": [_result(item) for item in answer.ranked]}


def _result(item: RankedDocument) -> dict[str, Any]:
    result: dict[str, Any] = {"index": item.index, "score": item.score}
    if item.document is not None:
        result["document"] = item.document
    return result
