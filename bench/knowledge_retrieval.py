"""Knowledge retrieval at 100,000 chunks (docs/operations.md, "Performance targets": p99 ≤ 50 ms).

Seeds one knowledge base with 100,000 chunks of ~80 words each (a 5,000-word vocabulary drawn with a
skew, so some words are common and most are rare, as in real text) and a 384-dimension float32 vector
per chunk, loaded with COPY; builds the knowledge base's vector index (resources/knowledge/vectors.py,
usearch's HNSW, persisted under the index directory) and times `resources.knowledge.search.chunks_search`
— what the `retrieve_knowledge_base` handler runs on its database thread — for top_k = 10: full text alone
(the match on the query's rarer words, resources/knowledge/search.py), the vector index alone, and hybrid
(both, fused). Beside the latency, recall@10 of the index against exact cosine search over the same
vectors.

The vectors are drawn like embeddings, not uniformly: real embedding models put texts on topics, so each
chunk is one of 2,000 topic directions plus noise, and each query is near a topic. Independent Gaussian
vectors in 384 dimensions have no near neighbours at all (every cosine is ~0), and no approximate index
finds their exact top 10 (recall 0.07-0.25 measured with usearch and hnswlib alike).

Needs DATABASE_URL=postgres://...; exits 2 when it cannot measure. The index file goes to a temporary
directory (LANGBOT_KNOWLEDGE_INDEX_DIR), removed at the end.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time

import numpy as np

from bench._report import percentile, print_table

CHUNKS = 100_000
WORDS_PER_CHUNK = 80
VOCABULARY = 5_000
DIMENSIONS = 384
SAMPLES = 400
TOP_K = 10
TOPICS = 2_000


def _word(rng: random.Random) -> str:
    # Skewed: low indexes are frequent (a few words appear in most chunks), high ones rare.
    return f"term{int(VOCABULARY * rng.random() ** 3)}"


def _embedding_like(rng: np.random.Generator, centres: np.ndarray, count: int, noise: float) -> np.ndarray:
    """Unit vectors near random topic directions (see the module's docstring)."""
    picked = centres[rng.integers(0, centres.shape[0], count)]
    vectors = picked + noise * rng.standard_normal((count, centres.shape[1])).astype(np.float32) / np.sqrt(DIMENSIONS)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def main() -> None:
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("cannot measure: set DATABASE_URL=postgres://... (the target is for PostgreSQL)")
        sys.exit(2)
    from bench._hostapi import django_on_scratch_database, drop_scratch_database

    index_dir = tempfile.mkdtemp(prefix="kb-index-bench-")
    os.environ["LANGBOT_KNOWLEDGE_INDEX_DIR"] = index_dir
    django_on_scratch_database("knowledge_bench")
    from django.db import connection

    from bindings.models import Workspace
    from resources.knowledge.search import chunks_search
    from resources.knowledge.term_counts import term_counts_rebuild
    from resources.knowledge.vectors import vector_index, vector_index_sync
    from resources.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument

    try:
        workspace = Workspace.objects.create(slug="bench", name="bench")
        kb = KnowledgeBase.objects.create(workspace=workspace, kb_id="bench", name="bench")
        document = KnowledgeDocument.objects.create(
            workspace=workspace, knowledge_base=kb, name="seed.txt", mime_type="text/plain", status="ready"
        )
        rng = random.Random(11)
        vector_rng = np.random.default_rng(11)
        centres = vector_rng.standard_normal((TOPICS, DIMENSIONS)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        vectors = _embedding_like(vector_rng, centres, CHUNKS, noise=0.8)
        started = time.perf_counter()
        table = KnowledgeChunk._meta.db_table
        with connection.cursor() as cursor:
            raw = cursor.cursor
            columns = (
                "workspace_id, knowledge_base_id, document_id, position, text, metadata, token_count, embedding, "
                "search_terms"
            )
            with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for position in range(CHUNKS):
                    text = " ".join(_word(rng) for _ in range(WORDS_PER_CHUNK))
                    copy.write_row(
                        (workspace.pk, kb.pk, document.pk, position, text, '{"page": 1}', WORDS_PER_CHUNK,
                         vectors[position].tobytes(), "")
                    )  # fmt: skip
            cursor.execute(f"ANALYZE {table}")
        # What ingestion maintains document by document: the knowledge base's chunk count per word.
        term_counts_rebuild(knowledge_base_pk=kb.pk)
        KnowledgeBase.objects.filter(pk=kb.pk).update(index_version=1)
        kb.refresh_from_db()
        load_seconds = time.perf_counter() - started

        def query(common: bool) -> str:
            words = [f"term{rng.randint(200, VOCABULARY - 1)}" for _ in range(3)]
            return " ".join([*words, "term3"] if common else words)

        def timed(text: str, vector: np.ndarray | None) -> float:
            t0 = time.perf_counter()
            entries = chunks_search(knowledge_base=kb, query_text=text, top_k=TOP_K, query_vector=vector)
            elapsed = (time.perf_counter() - t0) * 1000
            assert entries, f"no entries for {text!r}"
            return elapsed

        for _ in range(30):
            timed(query(False), None)
        rare = [timed(query(False), None) for _ in range(SAMPLES)]
        common = [timed(query(True), None) for _ in range(SAMPLES)]
        t0 = time.perf_counter()
        vector_index_sync(kb)
        build_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = vector_index(kb)
        map_ms = (time.perf_counter() - t0) * 1000
        qv = _embedding_like(np.random.default_rng(5), centres, SAMPLES, noise=0.8)
        vector_only = []
        for i in range(SAMPLES):
            t0 = time.perf_counter()
            chunks_search(knowledge_base=kb, query_text="", top_k=TOP_K, query_vector=qv[i], vector_only=True)
            vector_only.append((time.perf_counter() - t0) * 1000)
        hybrid = [timed(query(False), qv[i]) for i in range(SAMPLES)]
        # Recall@10 of the index against exact cosine search over the same (normalized) vectors.
        ids = np.array(
            KnowledgeChunk.objects.filter(knowledge_base=kb).order_by("position").values_list("id", flat=True)
        )
        exact_top = np.argsort(-(qv @ vectors.T), axis=1)[:, :TOP_K]
        found = 0
        for i in range(SAMPLES):
            approximate = {chunk_id for chunk_id, _ in index.ranked(qv[i], limit=TOP_K)}
            found += len(approximate & set(ids[exact_top[i]].tolist()))
        recall = found / (SAMPLES * TOP_K)
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN SELECT id FROM {table} WHERE search_vector @@ to_tsquery('simple', 'term900')")
            plan = " ".join(row[0] for row in cursor.fetchall())
    finally:
        drop_scratch_database()
        shutil.rmtree(index_dir, ignore_errors=True)

    print_table(
        [
            ("chunks seeded (COPY, with 384-d vectors)", f"{CHUNKS:,} in {load_seconds:.1f} s", ""),
            ("full text, 3 words, p50", f"{percentile(rare, 50):.2f} ms", ""),
            ("full text, 3 words, p99", f"{percentile(rare, 99):.2f} ms", "≤ 50 ms"),
            ("full text, 3 words + a common one, p50", f"{percentile(common, 50):.2f} ms", ""),
            ("full text, 3 words + a common one, p99", f"{percentile(common, 99):.2f} ms", "≤ 50 ms"),
            ("vector index alone, p50", f"{percentile(vector_only, 50):.2f} ms", ""),
            ("vector index alone, p99", f"{percentile(vector_only, 99):.2f} ms", "≤ 50 ms"),
            ("hybrid (full text + vector index, RRF), p50", f"{percentile(hybrid, 50):.2f} ms", ""),
            ("hybrid (full text + vector index, RRF), p99", f"{percentile(hybrid, 99):.2f} ms", "≤ 50 ms"),
            ("vector index recall@10 against exact search", f"{recall:.3f}", "≥ 0.95"),
            ("vector index build (once; ingestion then adds and removes)", f"{build_seconds:.0f} s", ""),
            ("index file mapped (once per process and change)", f"{map_ms:.0f} ms", ""),
            ("plan: GIN index on search_vector", "yes" if "kb_chunk_search_idx" in plan else f"no: {plan[:80]}", "yes"),
        ]
    )


if __name__ == "__main__":
    main()
