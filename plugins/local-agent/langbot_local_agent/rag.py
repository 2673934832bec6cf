"""Retrieval-augmented context: query every knowledge base the run may read, optionally rerank, and turn
the chunks into one `knowledge-context` fence plus the citations the reply carries.

The knowledge bases are the run's authorized ones (`ctx.resources.knowledge_bases`: the config's
selections the binding allows, or every one it allows when the config picks none), queried concurrently
with the user's text; a base that fails is reported in the run's metadata and skipped. With a rerank
model the merged chunks (at most 64, the host's cap) are re-scored and the best `rerank-top-k` kept;
without one, or when reranking fails, the chunks keep their retrieval order by score. Chunk text goes
only into the fence, never into the user's message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from langbot_local_agent.config import LocalAgentConfig
from langbot_sdk.protocol import AgentAPIException, AgentRunContext, KnowledgeEntry
from langbot_sdk.proxy import AgentRunAPIProxy

RERANK_MAX_DOCUMENTS = 64
CITATION_EXCERPT_CHARS = 200


@dataclass
class RetrievedChunk:
    kb_id: str
    kb_name: str
    entry: KnowledgeEntry
    score: float | None
    rerank_score: float | None = None

    def citation(self, number: int) -> dict[str, Any]:
        meta = self.entry.metadata
        citation: dict[str, Any] = {
            "index": number,
            "kb_id": self.kb_id,
            "chunk_id": self.entry.id,
            "document_id": meta.get("document_id"),
            "document_name": meta.get("document_name"),
            "position": meta.get("position"),
            "score": self.score,
            "excerpt": self.entry.content[:CITATION_EXCERPT_CHARS],
        }
        if self.rerank_score is not None:
            citation["rerank_score"] = self.rerank_score
        return citation


@dataclass
class Retrieval:
    chunks: list[RetrievedChunk] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    reranked_by: str | None = None

    def citations(self) -> list[dict[str, Any]]:
        return [chunk.citation(number) for number, chunk in enumerate(self.chunks, start=1)]

    def fence_content(self) -> str:
        blocks = []
        for number, chunk in enumerate(self.chunks, start=1):
            meta = chunk.entry.metadata
            source = meta.get("document_name") or meta.get("document_id") or chunk.entry.id
            blocks.append(f"[{number}] {source} (knowledge base: {chunk.kb_name})\n{chunk.entry.content}")
        return "\n\n".join(blocks)


async def retrieve(api: AgentRunAPIProxy, ctx: AgentRunContext, config: LocalAgentConfig, query: str) -> Retrieval:
    bases = [kb for kb in ctx.resources.knowledge_bases if not kb.operations or "retrieve" in kb.operations]
    outcome = Retrieval()
    if not bases or not query.strip():
        return outcome

    async def one(kb_id: str) -> list[KnowledgeEntry]:
        return (await api.knowledge.retrieve(kb_id, query, top_k=config.retrieval_top_k)).entries

    answers = await asyncio.gather(*(one(kb.kb_id) for kb in bases), return_exceptions=True)
    for kb, answer in zip(bases, answers, strict=True):
        if isinstance(answer, AgentAPIException):
            outcome.errors.append({"kb_id": kb.kb_id, "code": answer.error.code, "message": answer.error.message})
        elif isinstance(answer, BaseException):
            raise answer
        else:
            outcome.chunks += [RetrievedChunk(kb.kb_id, kb.name or kb.kb_id, e, e.score) for e in answer]
    outcome.chunks.sort(key=lambda c: c.score if c.score is not None else float("-inf"), reverse=True)
    await _rerank(api, ctx, config, query, outcome)
    return outcome


async def _rerank(
    api: AgentRunAPIProxy, ctx: AgentRunContext, config: LocalAgentConfig, query: str, outcome: Retrieval
) -> None:
    model = ctx.resources.find_model(config.rerank_model) if config.rerank_model else None
    if model is None or not outcome.chunks:
        return
    candidates = outcome.chunks[:RERANK_MAX_DOCUMENTS]
    try:
        ranked = await api.models.rerank(
            model.model_id, query, [c.entry.content for c in candidates], top_k=config.rerank_top_k
        )
    except AgentAPIException as exc:
        outcome.errors.append({"rerank_model": model.model_id, "code": exc.error.code, "message": exc.error.message})
        return
    kept: list[RetrievedChunk] = []
    for item in sorted(ranked.results, key=lambda r: r.score, reverse=True)[: config.rerank_top_k]:
        if 0 <= item.index < len(candidates):
            chunk = candidates[item.index]
            chunk.rerank_score = item.score
            kept.append(chunk)
    outcome.chunks = kept
    outcome.reranked_by = model.model_id
