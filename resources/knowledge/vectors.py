"""The dense vectors of a knowledge base in an approximate-nearest-neighbour index (usearch's HNSW graph),
persisted as one file per knowledge base and memory-mapped for searching.

Why an index and not a matrix product: a product reads every vector on every query (100,000 × 384 float32 is
150 MB), so its time grows with the knowledge base and with whatever else uses the memory bus. An HNSW
search visits a few thousand vectors whatever the size. Why usearch: measured against hnswlib on the same
vectors (bench/README.md, "Knowledge bases") the two answer alike, and usearch can search a saved index in
place (`view=True`, a memory map), so processes share the operating system's page cache instead of each
holding a copy of every vector.

The file is `<LANGBOT_KNOWLEDGE_INDEX_DIR>/<database>/kb-<pk>.usearch` (default `var/knowledge-index/`); its keys are
chunk ids. `vector_index_sync` brings it in line with the database — adds the chunks with vectors it lacks,
removes the ones gone — and records the knowledge base's `index_version` beside it; ingestion and deletion
call it after their commit, and a search whose knowledge base moved past the recorded version calls it
first. Writers take an exclusive file lock and replace the file atomically (write, then rename), so a
reader maps either the old file or the new one. Several hosts need the directory on shared storage, or
each keeps its own file (then each syncs on its first search after a change).

A deleted chunk is never returned even while the file lags: search.py reads the hits' rows back and drops
ids that no longer exist.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from usearch.index import Index

from resources.models import KnowledgeBase, KnowledgeChunk

# HNSW parameters: 16 links per node and a search breadth of 128 held recall@10 above 0.95 at 100,000
# chunks in bench/knowledge_retrieval.py; the breadth grows with the candidates asked for.
CONNECTIVITY = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 128
# With a metadata filter the allowed chunks are ranked exactly when few (their vectors read from the
# database); beyond this many the index is asked for more candidates and the others dropped.
EXACT_FILTER_MAX = 5000
_LOAD_BATCH = 2000

logger = logging.getLogger(__name__)


def _directory() -> Path:
    return Path(settings.KNOWLEDGE_INDEX_DIR)


def _paths(knowledge_base_pk: int) -> tuple[Path, Path, Path]:
    # A subdirectory per database: two databases on one host (test workers, a bench's scratch database)
    # hold knowledge bases with the same primary keys.
    database = connection.settings_dict
    name = f"{connection.vendor}:{database.get('HOST') or ''}:{database.get('PORT') or ''}:{database['NAME']}"
    base = _directory() / hashlib.sha256(name.encode()).hexdigest()[:16] / f"kb-{knowledge_base_pk}"
    return base.with_suffix(".usearch"), base.with_suffix(".json"), base.with_suffix(".lock")


def _unit(vector: np.ndarray) -> np.ndarray | None:
    norm = float(np.linalg.norm(vector))
    return None if norm == 0.0 else (vector / norm).astype(np.float32)


@dataclass(frozen=True)
class VectorIndex:
    """One knowledge base's index as mapped by this process (nothing when it has no vectors)."""

    knowledge_base_pk: int
    version: int
    index: Index | None

    def ranked(self, query: np.ndarray, *, limit: int, allowed: set[int] | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the best `limit` chunks, best first; only `allowed` ids when given."""
        if self.index is None or len(self.index) == 0 or query.shape != (self.index.ndim,):
            return []
        unit = _unit(query.astype(np.float32))
        if unit is None:
            return []
        if allowed is not None and len(allowed) <= EXACT_FILTER_MAX:
            return _exact(self.knowledge_base_pk, unit, limit=limit, ids=allowed)
        wanted = min(len(self.index), limit if allowed is None else limit * 10)
        matches = self.index.search(unit, wanted, threads=1)
        # usearch's cosine distance is 1 - cosine.
        pairs = zip(matches.keys, matches.distances, strict=True)
        ranked = [(int(key), 1.0 - float(distance)) for key, distance in pairs]
        if allowed is not None:
            ranked = [(key, score) for key, score in ranked if key in allowed]
        return ranked[:limit]


def _exact(knowledge_base_pk: int, unit: np.ndarray, *, limit: int, ids: set[int] | None) -> list[tuple[int, float]]:
    """Exact cosine ranking read from the database (filtered searches over few chunks, and tests)."""
    rows = KnowledgeChunk.objects.filter(knowledge_base_id=knowledge_base_pk, embedding__isnull=False)
    if ids is not None:
        rows = rows.filter(id__in=list(ids))
    scored: list[tuple[int, float]] = []
    for chunk_id, blob in rows.values_list("id", "embedding").iterator(chunk_size=_LOAD_BATCH):
        vector = _unit(np.frombuffer(bytes(blob or b""), dtype=np.float32))
        if vector is not None and vector.shape == unit.shape:
            scored.append((int(chunk_id), float(vector @ unit)))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit]


def exact_ranked(knowledge_base: KnowledgeBase, query: np.ndarray, *, limit: int) -> list[tuple[int, float]]:
    """The exact answer `ranked` approximates: recall measurements and tests compare against it."""
    unit = _unit(query.astype(np.float32))
    return [] if unit is None else _exact(knowledge_base.pk, unit, limit=limit, ids=None)


def _stored_vectors(knowledge_base_pk: int, skip: set[int]) -> tuple[list[int], list[np.ndarray]]:
    rows = KnowledgeChunk.objects.filter(knowledge_base_id=knowledge_base_pk, embedding__isnull=False)
    ids: list[int] = []
    vectors: list[np.ndarray] = []
    for chunk_id, blob in rows.order_by("id").values_list("id", "embedding").iterator(chunk_size=_LOAD_BATCH):
        if chunk_id in skip:
            continue
        vector = _unit(np.frombuffer(bytes(blob or b""), dtype=np.float32))
        if vector is not None:
            ids.append(int(chunk_id))
            vectors.append(vector)
    return ids, vectors


def vector_index_sync(knowledge_base: KnowledgeBase) -> None:
    """Bring the knowledge base's index file in line with its chunks (see the module's docstring)."""
    index_path, meta_path, lock_path = _paths(knowledge_base.pk)
    index_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        row = KnowledgeBase.objects.filter(pk=knowledge_base.pk).values_list("index_version", "created_at").first()
        if row is None:  # the knowledge base is gone
            vector_index_drop(knowledge_base.pk)
            return
        recorded = _recorded(meta_path)
        index: Index | None = None
        # A file of another knowledge base that had this primary key is not built upon.
        if index_path.exists() and recorded is not None and recorded[1] == row[1].isoformat():
            index = Index.restore(str(index_path))
        current = set(
            KnowledgeChunk.objects.filter(knowledge_base_id=knowledge_base.pk, embedding__isnull=False).values_list(
                "id", flat=True
            )
        )
        present = set() if index is None else {int(key) for key in np.asarray(index.keys)}
        gone = present - current
        ids, vectors = _stored_vectors(knowledge_base.pk, skip=present - gone)
        if vectors:
            # Vectors of another size (a model changed under stored chunks) cannot be compared; the common
            # size wins, and an index of another size is rebuilt.
            dim = Counter(vector.shape[0] for vector in vectors).most_common(1)[0][0]
            if index is not None and index.ndim != dim:
                index, gone = None, set()
                ids, vectors = _stored_vectors(knowledge_base.pk, skip=set())
            keep = [i for i, vector in enumerate(vectors) if vector.shape[0] == dim]
            ids, vectors = [ids[i] for i in keep], [vectors[i] for i in keep]
        if index is None and vectors:
            index = Index(
                ndim=vectors[0].shape[0],
                metric="cos",
                dtype="f32",
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )
        if index is not None:
            if gone:
                index.remove(np.fromiter(gone, dtype=np.uint64, count=len(gone)))
            if ids:
                index.add(np.asarray(ids, dtype=np.uint64), np.vstack(vectors), threads=2)
            temporary = index_path.with_suffix(".usearch.tmp")
            index.save(str(temporary))
            os.replace(temporary, index_path)
        elif index_path.exists():
            index_path.unlink()
        meta_temporary = meta_path.with_suffix(".json.tmp")
        meta_temporary.write_text(json.dumps({"index_version": row[0], "created_at": row[1].isoformat()}))
        os.replace(meta_temporary, meta_path)


def vector_index_sync_on_commit(knowledge_base_pk: int) -> None:
    """Sync the index once the caller's transaction commits. A failure is logged, not raised: the change
    is committed, and the next search of the knowledge base syncs again (its version moved on)."""

    def sync() -> None:
        try:
            knowledge_base = KnowledgeBase.objects.filter(pk=knowledge_base_pk).first()
            if knowledge_base is None:
                vector_index_drop(knowledge_base_pk)
            else:
                vector_index_sync(knowledge_base)
        except Exception:
            logger.exception("knowledge base %s: the vector index could not be synced", knowledge_base_pk)

    transaction.on_commit(sync)


def vector_index_drop(knowledge_base_pk: int) -> None:
    """Remove a knowledge base's index files (the knowledge base was deleted or its model changed)."""
    for path in _paths(knowledge_base_pk)[:2]:
        path.unlink(missing_ok=True)


def _recorded(meta_path: Path) -> tuple[int, str] | None:
    """The (index_version, knowledge base created_at) the index file was last synced at."""
    try:
        meta = json.loads(meta_path.read_text())
        return int(meta["index_version"]), str(meta["created_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# Maps of the index files this process searched, keyed by knowledge base: a map costs no copy of the
# vectors (the pages are the operating system's, shared by every process), only the open file.
_views: dict[int, tuple[tuple[int, int], VectorIndex]] = {}
_lock = threading.Lock()


def vector_index(knowledge_base: KnowledgeBase) -> VectorIndex:
    """The knowledge base's index as of its `index_version`, synced first when the file lags behind."""
    index_path, meta_path, _ = _paths(knowledge_base.pk)
    if _recorded(meta_path) != (knowledge_base.index_version, knowledge_base.created_at.isoformat()):
        vector_index_sync(knowledge_base)
    try:
        stat = index_path.stat()
    except FileNotFoundError:
        return VectorIndex(knowledge_base.pk, knowledge_base.index_version, None)
    identity = (stat.st_ino, stat.st_mtime_ns)
    with _lock:
        cached = _views.get(knowledge_base.pk)
        if cached is not None and cached[0] == identity:
            return cached[1]
    view = Index.restore(str(index_path), view=True)
    if view is not None:
        # The breadth is not saved in the file. (usearch declares its setter apart from its getter, which
        # mypy reads as read-only.)
        view.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]
    mapped = VectorIndex(knowledge_base.pk, knowledge_base.index_version, view)
    with _lock:
        _views[knowledge_base.pk] = (identity, mapped)
    return mapped


def vector_cache_clear() -> None:
    """Forget this process's maps (tests that point the index directory elsewhere)."""
    with _lock:
        _views.clear()
