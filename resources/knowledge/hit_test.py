"""The knowledge base hit test: an operator's query answered by the same retrieval a run gets
(`resources.knowledge.search.chunks_search`, as `hostapi.knowledge` calls it), for
`POST /api/v1/knowledge-bases/{kb_id}/search` and the query box on the knowledge base's admin page.

Modes: `full_text`; `vector` (the cosine alone; needs an embedding model); `hybrid` (both, fused — what runs
get when the knowledge base has an embedding model). Without a mode the hit test does what a run would:
hybrid with an embedding model, full text without. As for a run, a hybrid query whose embedding call fails
is answered from full text, and the answer says so (`embedding_error`); a `vector` query cannot be, so it
fails with that error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from resources.knowledge.search import MAX_TOP_K, chunks_search
from resources.models import KnowledgeBase
from resources.providers.embeddings import texts_embed
from resources.providers.failures import ProviderCallError

SearchMode = Literal["full_text", "vector", "hybrid"]
SEARCH_MODES: tuple[str, ...] = ("full_text", "vector", "hybrid")
QUERY_MAX_CHARS = 2000


class HitTestError(ValueError):
    """A query this knowledge base cannot answer: `field` names the input at fault, `code` is the API's."""

    def __init__(self, field: str, message: str, code: str = "invalid_argument"):
        super().__init__(message)
        self.field = field
        self.code = code


@dataclass(frozen=True)
class Hit:
    rank: int
    score: float
    chunk_id: str
    document_id: str
    document_name: str
    position: int
    content: str
    full_text_score: float | None
    vector_score: float | None
    metadata: dict[str, Any]


@dataclass(frozen=True)
class HitTest:
    query: str
    mode: str
    """The mode the ranking used (for a hybrid query whose embedding failed: `full_text`)."""
    hits: list[Hit] = field(default_factory=list)
    embedding_error: str | None = None


_ENTRY_KEYS = {"document_id", "document_name", "mime_type", "position", "full_text_score", "vector_score"}


def _hit(rank: int, entry: dict[str, Any]) -> Hit:
    metadata = entry.get("metadata") or {}
    return Hit(
        rank=rank,
        score=float(entry.get("score") or 0.0),
        chunk_id=str(entry.get("id")),
        document_id=str(metadata.get("document_id") or ""),
        document_name=str(metadata.get("document_name") or ""),
        position=int(metadata.get("position") or 0),
        content=str(entry.get("content") or ""),
        full_text_score=metadata.get("full_text_score"),
        vector_score=metadata.get("vector_score"),
        # What the chunk carries besides (its page, heading, the document's upload metadata).
        metadata={k: v for k, v in metadata.items() if k not in _ENTRY_KEYS},
    )


def knowledge_base_hit_test(
    *, knowledge_base: KnowledgeBase, query: str, top_k: int = 5, mode: str | None = None
) -> HitTest:
    """Rank the knowledge base's chunks for `query`, best first, at most `top_k` (1–50)."""
    query = query.strip()
    if not query:
        raise HitTestError("query", "Type something to search for.")
    if len(query) > QUERY_MAX_CHARS:
        raise HitTestError("query", f"At most {QUERY_MAX_CHARS} characters.")
    if not 1 <= top_k <= MAX_TOP_K:
        raise HitTestError("top_k", f"Between 1 and {MAX_TOP_K}.")
    model = knowledge_base.embedding_model
    if mode is None:
        mode = "hybrid" if model is not None else "full_text"
    if mode not in SEARCH_MODES:
        raise HitTestError("mode", f"One of {', '.join(SEARCH_MODES)}.")
    if mode != "full_text" and model is None:
        raise HitTestError("mode", f"{mode} needs an embedding model; this knowledge base has none.")
    vector: np.ndarray | None = None
    embedding_error: str | None = None
    if mode != "full_text" and model is not None:
        try:
            [vector] = texts_embed(model=model, texts=[query])
        except ProviderCallError as exc:
            if mode == "vector":
                raise HitTestError("mode", f"The embedding model failed: {exc}", code="provider.error") from None
            embedding_error = str(exc)
            mode = "full_text"
    entries = chunks_search(
        knowledge_base=knowledge_base, query_text=query, top_k=top_k, query_vector=vector, vector_only=mode == "vector"
    )
    hits = [_hit(rank, entry) for rank, entry in enumerate(entries, start=1)]
    return HitTest(query=query, mode=mode, hits=hits, embedding_error=embedding_error)
