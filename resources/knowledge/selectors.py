"""Reads for knowledge bases, their documents and chunks."""

from __future__ import annotations

import uuid

from django.db.models import Count, QuerySet

from bindings.models import Workspace
from resources.models import KnowledgeBase, KnowledgeDocument


def knowledge_bases_by_id(*, workspace_id: int, kb_ids: list[str] | None) -> dict[str, KnowledgeBase]:
    """The workspace's knowledge bases among `kb_ids` (all of them when None), keyed by id, in one query (the
    run's snapshot)."""
    rows = KnowledgeBase.objects.filter(workspace_id=workspace_id)
    rows = rows.order_by("kb_id") if kb_ids is None else rows.filter(kb_id__in=kb_ids)
    return {row.kb_id: row for row in rows}


def _with_counts(queryset: QuerySet[KnowledgeBase]) -> QuerySet[KnowledgeBase]:
    return queryset.select_related("embedding_model").annotate(document_count=Count("documents"))


def knowledge_base_list(*, workspace: Workspace) -> QuerySet[KnowledgeBase]:
    return _with_counts(KnowledgeBase.objects.filter(workspace=workspace)).order_by("kb_id")


def knowledge_base_get(*, workspace: Workspace, kb_id: str) -> KnowledgeBase | None:
    return _with_counts(KnowledgeBase.objects.filter(workspace=workspace, kb_id=kb_id)).first()


def knowledge_base_for_retrieval(*, workspace_id: int, kb_id: str) -> KnowledgeBase | None:
    """A run's knowledge base with its embedding model and provider (a retrieval's one read of it)."""
    return (
        KnowledgeBase.objects.filter(workspace_id=workspace_id, kb_id=kb_id)
        .select_related("embedding_model__provider__workspace")
        .first()
    )


def knowledge_document_list(*, knowledge_base: KnowledgeBase, status: str | None = None) -> QuerySet[KnowledgeDocument]:
    queryset = KnowledgeDocument.objects.filter(knowledge_base=knowledge_base).select_related("artifact")
    if status is not None:
        queryset = queryset.filter(status=status)
    return queryset.order_by("-created_at", "-id")


def knowledge_document_get(*, knowledge_base: KnowledgeBase, document_id: uuid.UUID) -> KnowledgeDocument | None:
    return (
        KnowledgeDocument.objects.filter(knowledge_base=knowledge_base, document_id=document_id)
        .select_related("artifact", "knowledge_base")
        .first()
    )
