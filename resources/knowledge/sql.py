"""The hand-written runtime SQL of knowledge bases, per database vendor: the ranked full-text query over
the index that migration 0003 creates (its DDL is written out in the migration, so that edits here never
change history). Each statement is built here together with its parameters.

PostgreSQL: a stored generated `tsvector` column over the chunk's text and its CJK search terms with the
`simple` configuration, and a GIN index on it; a query ranks the matching chunks with `ts_rank_cd`. The
column is stored, not an expression index, so ranking reads the vector instead of parsing every matching
chunk's text again.

A query matches on some of its words and may rank on more (`rank`): the very common words of a large
knowledge base are left out of the match so that they do not make most chunks candidates, and still count
in the ranking of the candidates (resources/knowledge/search.py). The counts that decide it live in
`resources_knowledgeterm` (PostgreSQL only, created by migration 0004): per knowledge base and index word,
how many chunks hold it.

SQLite: an FTS5 external-content table over the chunks' `text` and `search_terms` (no second copy of the
text), kept in step by triggers, ranked with `bm25`. A later migration that makes Django rebuild the chunk
table on SQLite (it copies the table and drops the old one, triggers included) must create them again.
"""

from __future__ import annotations

from typing import Any

CHUNK_TABLE = "resources_knowledgechunk"
FTS_TABLE = "resources_knowledgechunk_fts"
SEARCH_VECTOR = "search_vector"
SEARCH_INDEX = "kb_chunk_search_idx"
TERM_TABLE = "resources_knowledgeterm"
TS_CONFIG = "simple"


def full_text_ranked(
    vendor: str,
    *,
    match: str,
    knowledge_base_pk: int,
    limit: int,
    restrict: tuple[str, tuple[Any, ...]] | None = None,
    rank: str | None = None,
) -> tuple[str, list[Any]]:
    """`SELECT id, score` of the knowledge base's chunks matching `match` (an engine query from
    `resources.knowledge.terms`), best first (higher score is better), at most `limit`. `restrict` is an
    ORM-compiled `SELECT id` the chunks must be among (the metadata filters). On PostgreSQL, `rank` is a
    wider query the candidates are scored with (`match` by default); FTS5's bm25 scores the match."""
    params: list[Any] = [match]
    if vendor == "postgresql":
        ranking = "q.query"
        if rank is not None and rank != match:
            ranking = f"to_tsquery('{TS_CONFIG}', %s)"
            params.insert(0, rank)
        sql = (
            f"SELECT c.id, ts_rank_cd(c.{SEARCH_VECTOR}, {ranking}) AS score "
            f"FROM {CHUNK_TABLE} c, to_tsquery('{TS_CONFIG}', %s) AS q(query) "
            f"WHERE c.knowledge_base_id = %s AND c.{SEARCH_VECTOR} @@ q.query"
        )
    elif vendor == "sqlite":
        sql = (
            f"SELECT c.id, -bm25({FTS_TABLE}) AS score "
            f"FROM {FTS_TABLE} JOIN {CHUNK_TABLE} c ON c.id = {FTS_TABLE}.rowid "
            f"WHERE {FTS_TABLE} MATCH %s AND c.knowledge_base_id = %s"
        )
    else:
        raise ValueError(f"no full-text search on {vendor}")
    params.append(knowledge_base_pk)
    if restrict is not None:
        restrict_sql, restrict_params = restrict
        sql += f" AND c.id IN ({restrict_sql})"
        params.extend(restrict_params)
    sql += " ORDER BY score DESC, c.id LIMIT %s"
    params.append(limit)
    return sql, params


def term_counts_of(*, knowledge_base_pk: int, terms: list[str]) -> tuple[str, list[Any]]:
    """`SELECT term, chunk_count` of the given index words in the knowledge base (PostgreSQL)."""
    sql = f"SELECT term, chunk_count FROM {TERM_TABLE} WHERE knowledge_base_id = %s AND term = ANY(%s)"
    return sql, [knowledge_base_pk, terms]


def term_counts_add(*, document_pk: int) -> tuple[str, list[Any]]:
    """Count the index words of a document's chunks into its knowledge base's term counts (PostgreSQL).
    Rows are written in word order, so that concurrent writers lock them in the same order."""
    sql = (
        f"INSERT INTO {TERM_TABLE} (knowledge_base_id, term, chunk_count) "
        f"SELECT c.knowledge_base_id, w.lexeme, count(*) FROM {CHUNK_TABLE} c, unnest(c.{SEARCH_VECTOR}) AS w "
        "WHERE c.document_id = %s GROUP BY c.knowledge_base_id, w.lexeme ORDER BY w.lexeme "
        f"ON CONFLICT (knowledge_base_id, term) DO UPDATE SET chunk_count = {TERM_TABLE}.chunk_count + "
        "EXCLUDED.chunk_count"
    )
    return sql, [document_pk]


def term_counts_subtract(*, document_pk: int) -> list[tuple[str, list[Any]]]:
    """Take a document's chunks out of the term counts (PostgreSQL), dropping words no chunk holds any
    more; run before its chunks are deleted."""
    words = (
        f"SELECT c.knowledge_base_id, w.lexeme AS term, count(*) AS n FROM {CHUNK_TABLE} c, "
        f"unnest(c.{SEARCH_VECTOR}) AS w WHERE c.document_id = %s GROUP BY c.knowledge_base_id, w.lexeme"
    )
    return [
        (
            f"UPDATE {TERM_TABLE} t SET chunk_count = t.chunk_count - d.n FROM ({words}) d "
            "WHERE t.knowledge_base_id = d.knowledge_base_id AND t.term = d.term",
            [document_pk],
        ),
        (
            f"DELETE FROM {TERM_TABLE} t USING ({words}) d "
            "WHERE t.knowledge_base_id = d.knowledge_base_id AND t.term = d.term AND t.chunk_count <= 0",
            [document_pk],
        ),
    ]


def term_counts_rebuild(*, knowledge_base_pk: int) -> list[tuple[str, list[Any]]]:
    """Count the knowledge base's words again from all its chunks (PostgreSQL): for chunks written
    without ingestion, such as a benchmark's COPY."""
    return [
        (f"DELETE FROM {TERM_TABLE} WHERE knowledge_base_id = %s", [knowledge_base_pk]),
        (
            f"INSERT INTO {TERM_TABLE} (knowledge_base_id, term, chunk_count) "
            f"SELECT c.knowledge_base_id, w.lexeme, count(*) FROM {CHUNK_TABLE} c, "
            f"unnest(c.{SEARCH_VECTOR}) AS w WHERE c.knowledge_base_id = %s GROUP BY c.knowledge_base_id, w.lexeme",
            [knowledge_base_pk],
        ),
    ]
