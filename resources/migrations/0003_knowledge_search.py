"""Knowledge search: the KB's index version, the chunks' CJK search terms, and the full-text index per
database (resources/knowledge/sql.py: a generated tsvector column with a GIN index on PostgreSQL, an FTS5
external-content table with triggers on SQLite; nothing elsewhere)."""

from typing import Any

from django.db import migrations, models


def _statements(install: bool) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        from resources.knowledge.sql import full_text_index_statements

        for statement in full_text_index_statements(schema_editor.connection.vendor, install=install):
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
