"""The hand-written SQL of knowledge bases, per database vendor: the full-text index (created by migration
0003) and the ranked full-text query. Each statement is built here together with its parameters.

PostgreSQL: a stored generated `tsvector` column over the chunk's text and its CJK search terms with the
`simple` configuration, and a GIN index on it; a query ranks the matching chunks with `ts_rank_cd`. The
column is stored, not an expression index, so ranking reads the vector instead of parsing every matching
chunk's text again.

SQLite: an FTS5 external-content table over the chunks' `text` and `search_terms` (no second copy of the
text), kept in step by triggers, ranked with `bm25`. A later migration that makes Django rebuild the chunk
table on SQLite (it copies the table and drops the old one, triggers included) must call
`sqlite_fts_install` again.
"""

from __future__ import annotations

from typing import Any

CHUNK_TABLE = "resources_knowledgechunk"
FTS_TABLE = "resources_knowledgechunk_fts"
SEARCH_VECTOR = "search_vector"
SEARCH_INDEX = "kb_chunk_search_idx"
TS_CONFIG = "simple"

POSTGRES_INSTALL = [
    f"ALTER TABLE {CHUNK_TABLE} ADD COLUMN {SEARCH_VECTOR} tsvector GENERATED ALWAYS AS "
    f"(to_tsvector('{TS_CONFIG}'::regconfig, text || ' ' || search_terms)) STORED",
    f"CREATE INDEX {SEARCH_INDEX} ON {CHUNK_TABLE} USING GIN ({SEARCH_VECTOR})",
]
POSTGRES_UNINSTALL = [
    f"DROP INDEX IF EXISTS {SEARCH_INDEX}",
    f"ALTER TABLE {CHUNK_TABLE} DROP COLUMN IF EXISTS {SEARCH_VECTOR}",
]

SQLITE_INSTALL = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(text, search_terms, content='{CHUNK_TABLE}', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ai AFTER INSERT ON {CHUNK_TABLE} BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, text, search_terms) VALUES (new.id, new.text, new.search_terms); END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ad AFTER DELETE ON {CHUNK_TABLE} BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text, search_terms) "
    "VALUES ('delete', old.id, old.text, old.search_terms); END",
    f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_au AFTER UPDATE OF text, search_terms ON {CHUNK_TABLE} BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text, search_terms) "
    "VALUES ('delete', old.id, old.text, old.search_terms); "
    f"INSERT INTO {FTS_TABLE}(rowid, text, search_terms) VALUES (new.id, new.text, new.search_terms); END",
    # Index whatever the table already holds.
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')",
]
SQLITE_UNINSTALL = [
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ai",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ad",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_au",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
]


def full_text_index_statements(vendor: str, *, install: bool) -> list[str]:
    """The DDL that creates (or drops) the full-text index on `vendor`; none for other databases, where
    retrieval ranks by vectors alone."""
    if vendor == "postgresql":
        return POSTGRES_INSTALL if install else POSTGRES_UNINSTALL
    if vendor == "sqlite":
        return SQLITE_INSTALL if install else SQLITE_UNINSTALL
    return []


def full_text_ranked(
    vendor: str,
    *,
    match: str,
    knowledge_base_pk: int,
    limit: int,
    restrict: tuple[str, tuple[Any, ...]] | None = None,
) -> tuple[str, list[Any]]:
    """`SELECT id, score` of the knowledge base's chunks matching `match` (an engine query from
    `resources.knowledge.terms`), best first (higher score is better), at most `limit`. `restrict` is an
    ORM-compiled `SELECT id` the chunks must be among (the metadata filters)."""
    params: list[Any] = [match, knowledge_base_pk]
    if vendor == "postgresql":
        sql = (
            f"SELECT c.id, ts_rank_cd(c.{SEARCH_VECTOR}, q.query) AS score "
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
    if restrict is not None:
        restrict_sql, restrict_params = restrict
        sql += f" AND c.id IN ({restrict_sql})"
        params.extend(restrict_params)
    sql += " ORDER BY score DESC, c.id LIMIT %s"
    params.append(limit)
    return sql, params
