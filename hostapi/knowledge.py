"""`retrieve_knowledge_base` against the workspace's knowledge bases (docs/host-apis.md, "Knowledge bases"). The caller
(`providers.knowledge_retrieve`) has already checked the run's snapshot.

The query's vector comes from the knowledge base's embedding model on this loop (an HTTP call bounded by
the run's remaining time); the ranking itself (`resources.knowledge.search`) runs on the database
executor. When the embedding provider fails, retrieval still answers from full text alone — a runner
asking for context is better served by the keyword matches than by an error — and the failure is logged.
"""

from __future__ import annotations

import logging

import numpy as np

from hostapi.base import HandlerResult, ProxyCall, not_found
from langbot_sdk.protocol import AgentAPIException, RetrieveKnowledgeBaseRequest, RetrieveKnowledgeBaseResult
from resources.knowledge.search import FilterError, chunks_search
from resources.knowledge.selectors import knowledge_base_for_retrieval
from resources.providers.embeddings import query_embed
from resources.providers.failures import ProviderCallError

logger = logging.getLogger(__name__)


async def knowledge_search(call: ProxyCall) -> HandlerResult:
    request: RetrieveKnowledgeBaseRequest = call.request
    kb_id = request.kb_id
    knowledge_base = await call.db(
        knowledge_base_for_retrieval, workspace_id=call.session.scope.workspace_id, kb_id=kb_id
    )
    if knowledge_base is None:
        raise not_found(f"knowledge base {kb_id!r} is not configured on this host", kb_id=kb_id)
    if not request.query_text.strip():
        raise AgentAPIException.invalid_argument("query_text is empty", kb_id=kb_id)
    query_vector: np.ndarray | None = None
    model = knowledge_base.embedding_model
    if model is not None:
        try:
            query_vector = await query_embed(model=model, text=request.query_text, timeout=max(call.remaining(), 0.001))
        except ProviderCallError as exc:
            logger.warning("knowledge base %s: query embedding failed, full text only: %s", kb_id, exc)
    try:
        entries = await call.db(
            chunks_search,
            knowledge_base=knowledge_base,
            query_text=request.query_text,
            top_k=request.top_k,
            filters=request.filters,
            query_vector=query_vector,
        )
    except FilterError as exc:
        raise AgentAPIException.invalid_argument(str(exc), kb_id=kb_id) from None
    return RetrieveKnowledgeBaseResult.model_validate({"entries": entries}).model_dump(mode="json")
