"""Per knowledge base, how many chunks hold each word of the full-text index (PostgreSQL only): retrieval
matches on a query's rarer words and leaves the very common ones to ranking, which needs these counts
without touching the chunks (resources/knowledge/term_counts.py). Filled here from the chunks already
indexed; kept up to date by ingestion and deletion. The DDL is written out here, not imported, so that
later edits of the runtime module cannot change what this migration did.
"""

from typing import Any

from django.db import migrations

POSTGRES_INSTALL = [
    # No foreign key: Django empties tables with TRUNCATE (test flushes), which a table it does not know of
    # referencing the knowledge bases would refuse. A trigger forgets a deleted knowledge base's counts,
    # however it is deleted (the service, a workspace's cascade).
    "CREATE TABLE resources_knowledgeterm ("
    "knowledge_base_id bigint NOT NULL, term text NOT NULL, chunk_count integer NOT NULL, "
    "PRIMARY KEY (knowledge_base_id, term))",
    "CREATE FUNCTION resources_knowledgeterm_forget() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "DELETE FROM resources_knowledgeterm WHERE knowledge_base_id = OLD.id; RETURN OLD; END $$",
    "CREATE TRIGGER resources_knowledgeterm_forget AFTER DELETE ON resources_knowledgebase "
    "FOR EACH ROW EXECUTE FUNCTION resources_knowledgeterm_forget()",
    "INSERT INTO resources_knowledgeterm (knowledge_base_id, term, chunk_count) "
    "SELECT c.knowledge_base_id, w.lexeme, count(*) "
    "FROM resources_knowledgechunk c, unnest(c.search_vector) AS w GROUP BY c.knowledge_base_id, w.lexeme",
]
POSTGRES_UNINSTALL = [
    "DROP TRIGGER IF EXISTS resources_knowledgeterm_forget ON resources_knowledgebase",
    "DROP FUNCTION IF EXISTS resources_knowledgeterm_forget()",
    "DROP TABLE IF EXISTS resources_knowledgeterm",
]


def _statements(install: bool) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in POSTGRES_INSTALL if install else POSTGRES_UNINSTALL:
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("resources", "0003_knowledge_search"),
    ]

    operations = [
        migrations.RunPython(_statements(install=True), _statements(install=False)),
    ]
