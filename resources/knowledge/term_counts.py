"""How many chunks of a knowledge base hold each word of its full-text index, on PostgreSQL (elsewhere
these do nothing and retrieval matches on every query word).

Retrieval reads them to match on a query's rarer words (resources/knowledge/search.py); ingestion adds a
document's words when its chunks are stored and subtracts them before its chunks are replaced or deleted,
in the same transaction, so the counts are exactly those of the committed chunks. Callers lock the
knowledge base's row first (by bumping its index version): writers of one knowledge base's counts take
their turns instead of deadlocking on each other's rows.
"""

from __future__ import annotations

from django.db import connection

from resources.knowledge import sql


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def term_counts_get(*, knowledge_base_pk: int, terms: list[str]) -> dict[str, int]:
    """The chunk count of each of `terms` that the knowledge base holds ({} off PostgreSQL)."""
    if not _postgres() or not terms:
        return {}
    statement, params = sql.term_counts_of(knowledge_base_pk=knowledge_base_pk, terms=terms)
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return {str(term): int(count) for term, count in cursor.fetchall()}


def term_counts_document_add(*, document_pk: int) -> None:
    if _postgres():
        with connection.cursor() as cursor:
            cursor.execute(*sql.term_counts_add(document_pk=document_pk))


def term_counts_document_subtract(*, document_pk: int) -> None:
    if _postgres():
        with connection.cursor() as cursor:
            for statement, params in sql.term_counts_subtract(document_pk=document_pk):
                cursor.execute(statement, params)


def term_counts_rebuild(*, knowledge_base_pk: int) -> None:
    if _postgres():
        with connection.cursor() as cursor:
            for statement, params in sql.term_counts_rebuild(knowledge_base_pk=knowledge_base_pk):
                cursor.execute(statement, params)
