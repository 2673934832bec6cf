"""Retrieval from one knowledge base: full-text ranking by the database, cosine ranking by the knowledge
base's approximate-nearest-neighbour index (resources/knowledge/vectors.py) when it has an embedding model,
the two fused, metadata filters applied to both.

Full text on PostgreSQL matches on the query's rarer words and ranks the candidates with all of them:
`ts_rank_cd` reads every candidate's row, so a word found in half of a 100,000-chunk knowledge base would
cost ~250 ms, and it weighs every word alike, so such a word would also decide the ranking. Words are
taken rarest first (the knowledge base's term counts, resources/knowledge/term_counts.py) while the chunks
they can match stay within `CANDIDATE_BUDGET`; the others still raise the score of the candidates that
hold them. Below the budget — every knowledge base of up to a few thousand chunks — all words match, as
on SQLite, where FTS5's bm25 already weighs words by their rarity.

Hybrid ranking is reciprocal rank fusion (score = Σ 1 / (60 + rank) over the two lists): it needs no
calibration between bm25 / ts_rank_cd scores and cosines, which live on unrelated scales, and a chunk
that both rankings like comes first. Each list contributes `max(3 × top_k, 50)` candidates.

The `score` an entry carries is therefore: the engine's relevance (ts_rank_cd on PostgreSQL, -bm25 on
SQLite) with full text alone; the cosine with vectors alone; the fused score in hybrid mode. Scores
compare entries of one answer, not answers of different knowledge bases. Each entry's metadata also holds
the separate `full_text_score` and `vector_score` that contributed.

Filters: `document_id` and `mime_type` (a value or a list of values), `document_name`, and any other key
compared for equality with the chunk's metadata (its page and heading, and the metadata given with the
document at upload); a list means any of its values.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection
from django.db.models import Q, QuerySet

from resources.knowledge import terms
from resources.knowledge.sql import full_text_ranked
from resources.knowledge.term_counts import term_counts_get
from resources.knowledge.vectors import vector_index
from resources.models import KnowledgeBase, KnowledgeChunk

MAX_TOP_K = 50
RRF_K = 60
MIN_CANDIDATES = 50
# Chunks a full-text query may make candidates (on PostgreSQL) before its commoner words are left out of
# the match: ranking reads each candidate's row, ~5 µs apiece when cached, so 2,000 keep a query near 10 ms.
CANDIDATE_BUDGET = 2000
_FILTER_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_Scalar = str | int | float | bool


class FilterError(ValueError):
    """Filters this search cannot apply; the message names the key."""


@dataclass
class Hit:
    chunk_id: int
    score: float
    full_text_score: float | None = None
    vector_score: float | None = None


def _values(key: str, value: Any) -> list[Any]:
    values = value if isinstance(value, list) else [value]
    if not values or len(values) > 100:
        raise FilterError(f"filter {key!r} needs between 1 and 100 values")
    for item in values:
        if item is None or not isinstance(item, _Scalar):
            raise FilterError(f"filter {key!r} takes a string, number or boolean, or a list of them")
    return values


def filters_q(filters: dict[str, Any]) -> Q:
    """The filters as one ORM condition on chunks (each key ANDed, each list ORed)."""
    condition = Q()
    for key, value in filters.items():
        if not _FILTER_KEY.match(key) or "__" in key:
            raise FilterError(f"filter key {key!r} must be 1–64 letters, digits, '_' or '-' (no '__')")
        values = _values(key, value)
        if key == "document_id":
            try:
                ids = [uuid.UUID(str(item)) for item in values]
            except ValueError:
                raise FilterError("filter 'document_id' takes document ids (UUIDs)") from None
            condition &= Q(document__document_id__in=ids)
        elif key == "mime_type":
            condition &= Q(document__mime_type__in=[str(item) for item in values])
        elif key == "document_name":
            condition &= Q(document__name__in=[str(item) for item in values])
        else:
            either = Q()
            for item in values:
                either |= Q(**{f"metadata__{key}": item})
            condition &= either
    return condition


def matching_terms(words: list[str], counts: dict[str, int], limit: int) -> list[str]:
    """The words a query matches on: the rarest first, then the next rarest while the chunks they may
    match stay within `CANDIDATE_BUDGET` (and always until `limit` chunks may match)."""
    chosen: list[str] = []
    total = 0
    for word in sorted(words, key=lambda word: counts.get(word, 0)):
        count = counts.get(word, 0)
        if chosen and total >= limit and total + count > CANDIDATE_BUDGET:
            break
        chosen.append(word)
        total += count
    return chosen


def _full_text(
    knowledge_base: KnowledgeBase, query_text: str, limit: int, restricted: QuerySet[KnowledgeChunk] | None
) -> list[tuple[int, float]]:
    words = terms.query_terms(query_text)
    vendor = connection.vendor
    if not words or vendor not in ("postgresql", "sqlite"):
        return []
    restrict = None
    if restricted is not None:
        restrict = restricted.values("id").query.sql_with_params()
    if vendor == "postgresql":
        counts = term_counts_get(knowledge_base_pk=knowledge_base.pk, terms=words)
        match = terms.postgres_tsquery(matching_terms(words, counts, limit))
        rank = terms.postgres_tsquery(words)
    else:
        match = rank = terms.fts5_query(words)
    sql, params = full_text_ranked(
        vendor, match=match, rank=rank, knowledge_base_pk=knowledge_base.pk, limit=limit, restrict=restrict
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]


def _fused(full_text: list[tuple[int, float]], vector: list[tuple[int, float]], top_k: int) -> list[Hit]:
    if not vector:
        return [Hit(chunk_id=i, score=s, full_text_score=s) for i, s in full_text[:top_k]]
    if not full_text:
        return [Hit(chunk_id=i, score=s, vector_score=s) for i, s in vector[:top_k]]
    hits: dict[int, Hit] = {}
    for rank, (chunk_id, score) in enumerate(full_text, start=1):
        hit = hits.setdefault(chunk_id, Hit(chunk_id=chunk_id, score=0.0))
        hit.score += 1.0 / (RRF_K + rank)
        hit.full_text_score = score
    for rank, (chunk_id, score) in enumerate(vector, start=1):
        hit = hits.setdefault(chunk_id, Hit(chunk_id=chunk_id, score=0.0))
        hit.score += 1.0 / (RRF_K + rank)
        hit.vector_score = score
    return sorted(hits.values(), key=lambda hit: (-hit.score, hit.chunk_id))[:top_k]


def _entries(hits: list[Hit]) -> list[dict[str, Any]]:
    rows = KnowledgeChunk.objects.filter(id__in=[hit.chunk_id for hit in hits]).values(
        "id", "text", "position", "metadata", "document__document_id", "document__name", "document__mime_type"
    )
    by_id = {row["id"]: row for row in rows}
    entries: list[dict[str, Any]] = []
    for hit in hits:
        row = by_id.get(hit.chunk_id)
        if row is None:  # deleted between ranking and reading
            continue
        document_id = str(row["document__document_id"])
        metadata: dict[str, Any] = {
            **(row["metadata"] or {}),
            "document_id": document_id,
            "document_name": row["document__name"],
            "mime_type": row["document__mime_type"],
            "position": row["position"],
        }
        if hit.full_text_score is not None:
            metadata["full_text_score"] = hit.full_text_score
        if hit.vector_score is not None:
            metadata["vector_score"] = hit.vector_score
        entries.append(
            {"id": f"{document_id}#{row['position']}", "content": row["text"], "score": hit.score, "metadata": metadata}
        )
    return entries


def chunks_search(
    *,
    knowledge_base: KnowledgeBase,
    query_text: str,
    top_k: int,
    filters: dict[str, Any] | None = None,
    query_vector: np.ndarray | None = None,
    vector_only: bool = False,
) -> list[dict[str, Any]]:
    """The best `top_k` (≤ 50) chunks for the query as `KnowledgeEntry` dicts, best first. Pass the query's
    vector (from the knowledge base's embedding model) for hybrid ranking; without it, full text only.
    `vector_only` (with a vector) ranks by the cosine alone — the hit test's `vector` mode."""
    top_k = max(1, min(top_k, MAX_TOP_K))
    restricted = None
    if filters:
        restricted = KnowledgeChunk.objects.filter(filters_q(filters), knowledge_base_id=knowledge_base.pk)
    if query_vector is None:
        return _entries(_fused(_full_text(knowledge_base, query_text, top_k, restricted), [], top_k))
    candidates = max(3 * top_k, MIN_CANDIDATES)
    # An index search visits a few thousand vectors (about a millisecond), so it runs on this thread
    # before the full-text query; a filtered one reads the allowed chunks' vectors on this connection.
    allowed = None if restricted is None else set(restricted.values_list("id", flat=True))
    vector = vector_index(knowledge_base).ranked(query_vector, limit=candidates, allowed=allowed)
    full_text = [] if vector_only else _full_text(knowledge_base, query_text, candidates, restricted)
    return _entries(_fused(full_text, vector, top_k))
