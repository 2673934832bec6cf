"""Knowledge search: the KB's index version, the chunks' CJK search terms, and the full-text index per
database — a stored generated `tsvector` column with a GIN index on PostgreSQL, an FTS5 external-content
table kept in step by triggers on SQLite, nothing elsewhere.

The DDL is written out here rather than imported from `resources/knowledge/sql.py` (which holds the
runtime queries over these objects), so that later edits of that module cannot change what this
migration did. A later migration that makes Django rebuild the chunk table on SQLite (it copies the table
and drops the old one, triggers included) must create the FTS5 table and triggers again.
"""

from typing import Any

from django.db import migrations, models

POSTGRES_INSTALL = [
    "ALTER TABLE resources_knowledgechunk ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
    "(to_tsvector('simple'::regconfig, text || ' ' || search_terms)) STORED",
    "CREATE INDEX kb_chunk_search_idx ON resources_knowledgechunk USING GIN (search_vector)",
]
POSTGRES_UNINSTALL = [
    "DROP INDEX IF EXISTS kb_chunk_search_idx",
    "ALTER TABLE resources_knowledgechunk DROP COLUMN IF EXISTS search_vector",
]
SQLITE_INSTALL = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS resources_knowledgechunk_fts USING fts5(text, search_terms, "
    "content='resources_knowledgechunk', content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS resources_knowledgechunk_fts_ai AFTER INSERT ON resources_knowledgechunk BEGIN "
    "INSERT INTO resources_knowledgechunk_fts(rowid, text, search_terms) "
    "VALUES (new.id, new.text, new.search_terms); END",
    "CREATE TRIGGER IF NOT EXISTS resources_knowledgechunk_fts_ad AFTER DELETE ON resources_knowledgechunk BEGIN "
    "INSERT INTO resources_knowledgechunk_fts(resources_knowledgechunk_fts, rowid, text, search_terms) "
    "VALUES ('delete', old.id, old.text, old.search_terms); END",
    "CREATE TRIGGER IF NOT EXISTS resources_knowledgechunk_fts_au "
    "AFTER UPDATE OF text, search_terms ON resources_knowledgechunk BEGIN "
    "INSERT INTO resources_knowledgechunk_fts(resources_knowledgechunk_fts, rowid, text, search_terms) "
    "VALUES ('delete', old.id, old.text, old.search_terms); "
    "INSERT INTO resources_knowledgechunk_fts(rowid, text, search_terms) "
    "VALUES (new.id, new.text, new.search_terms); END",
    # Index whatever the table already holds.
    "INSERT INTO resources_knowledgechunk_fts(resources_knowledgechunk_fts) VALUES ('rebuild')",
]
SQLITE_UNINSTALL = [
    "DROP TRIGGER IF EXISTS resources_knowledgechunk_fts_ai",
    "DROP TRIGGER IF EXISTS resources_knowledgechunk_fts_ad",
    "DROP TRIGGER IF EXISTS resources_knowledgechunk_fts_au",
    "DROP TABLE IF EXISTS resources_knowledgechunk_fts",
]
STATEMENTS = {
    ("postgresql", True): POSTGRES_INSTALL,
    ("postgresql", False): POSTGRES_UNINSTALL,
    ("sqlite", True): SQLITE_INSTALL,
    ("sqlite", False): SQLITE_UNINSTALL,
}


def _statements(install: bool) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        for statement in STATEMENTS.get((schema_editor.connection.vendor, install), []):
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("resources", "0002_mcp_and_knowledge"),
    ]

    operations = [
        migrations.AddField(
            model_name="knowledgebase",
            name="index_version",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="knowledgechunk",
            name="search_terms",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunPython(_statements(install=True), _statements(install=False)),
    ]
