"""Reads for knowledge bases, their documents and chunks."""

from __future__ import annotations

from resources.models import KnowledgeBase


def knowledge_bases_by_id(*, workspace_id: int, kb_ids: list[str]) -> dict[str, KnowledgeBase]:
    """The workspace's knowledge bases among `kb_ids`, keyed by id, in one query (the run's snapshot)."""
    rows = KnowledgeBase.objects.filter(workspace_id=workspace_id, kb_id__in=kb_ids)
    return {row.kb_id: row for row in rows}
