"""The dense vectors of a knowledge base as one normalized float32 matrix per process, for cosine ranking
with one matrix product.

The matrix is loaded on first use and kept while the knowledge base's `index_version` is unchanged (every
document that becomes ready or is deleted bumps it), so a retrieval costs one product over the matrix, not
a read of every vector. Memory is n × dim × 4 bytes per knowledge base (100,000 chunks of 768 dimensions:
~300 MB); the cache holds at most `CACHE_MAX_BYTES` and forgets the least recently used matrices beyond it.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass

import numpy as np

from resources.models import KnowledgeBase, KnowledgeChunk

CACHE_MAX_BYTES = 1024**3
_LOAD_BATCH = 2000


@dataclass(frozen=True)
class VectorIndex:
    version: int
    ids: np.ndarray  # int64 chunk ids, one per row
    matrix: np.ndarray  # float32, rows of unit length

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.matrix.nbytes)

    def ranked(self, query: np.ndarray, *, limit: int, allowed: set[int] | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the best `limit` rows, best first; only `allowed` ids when given."""
        if self.matrix.shape[0] == 0 or query.shape != (self.matrix.shape[1],):
            return []
        norm = float(np.linalg.norm(query))
        if norm == 0.0:
            return []
        scores = self.matrix @ (query.astype(np.float32) / norm)
        if allowed is not None:
            mask = np.isin(self.ids, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
            scores = np.where(mask, scores, -np.inf)
        limit = min(limit, scores.shape[0])
        top = np.argpartition(-scores, limit - 1)[:limit]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self.ids[i]), float(scores[i])) for i in top if np.isfinite(scores[i])]


_cache: OrderedDict[int, VectorIndex] = OrderedDict()
_lock = threading.Lock()


def _load(knowledge_base: KnowledgeBase) -> VectorIndex:
    rows = (
        KnowledgeChunk.objects.filter(knowledge_base_id=knowledge_base.pk, embedding__isnull=False)
        .order_by("id")
        .values_list("id", "embedding")
    )
    ids: list[int] = []
    vectors: list[np.ndarray] = []
    for chunk_id, blob in rows.iterator(chunk_size=_LOAD_BATCH):
        ids.append(chunk_id)
        vectors.append(np.frombuffer(bytes(blob or b""), dtype=np.float32))
    if not vectors:
        return VectorIndex(knowledge_base.index_version, np.zeros(0, np.int64), np.zeros((0, 0), np.float32))
    # Vectors of another size (a model changed under stored chunks) cannot be compared; the common size wins.
    dim = Counter(vector.shape[0] for vector in vectors).most_common(1)[0][0]
    keep = [i for i, vector in enumerate(vectors) if vector.shape[0] == dim]
    matrix = np.vstack([vectors[i] for i in keep]).astype(np.float32, copy=False)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    matrix /= norms
    return VectorIndex(knowledge_base.index_version, np.array([ids[i] for i in keep], dtype=np.int64), matrix)


def vector_index(knowledge_base: KnowledgeBase) -> VectorIndex:
    """The knowledge base's matrix as of its `index_version`, loading it when the cached one is older."""
    with _lock:
        cached = _cache.get(knowledge_base.pk)
        if cached is not None and cached.version == knowledge_base.index_version:
            _cache.move_to_end(knowledge_base.pk)
            return cached
    # Loaded outside the lock: another knowledge base's retrieval need not wait for this one's load.
    index = _load(knowledge_base)
    with _lock:
        _cache[knowledge_base.pk] = index
        _cache.move_to_end(knowledge_base.pk)
        while len(_cache) > 1 and sum(item.nbytes for item in _cache.values()) > CACHE_MAX_BYTES:
            _cache.popitem(last=False)
    return index


def vector_cache_clear() -> None:
    with _lock:
        _cache.clear()
