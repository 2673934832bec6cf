"""Routes of knowledge under `/api/v1/`."""

from django.urls import path

from resources.knowledge.api import (
    KnowledgeBaseDetailApi,
    KnowledgeBaseListApi,
    KnowledgeBaseSearchApi,
    KnowledgeDocumentDetailApi,
    KnowledgeDocumentListApi,
)

urlpatterns = [
    path("knowledge-bases", KnowledgeBaseListApi.as_view(), name="knowledge-base-list"),
    path("knowledge-bases/<slug:kb_id>", KnowledgeBaseDetailApi.as_view(), name="knowledge-base-detail"),
    path("knowledge-bases/<slug:kb_id>/search", KnowledgeBaseSearchApi.as_view(), name="knowledge-base-search"),
    path("knowledge-bases/<slug:kb_id>/documents", KnowledgeDocumentListApi.as_view(), name="knowledge-document-list"),
    path(
        "knowledge-bases/<slug:kb_id>/documents/<uuid:document_id>",
        KnowledgeDocumentDetailApi.as_view(),
        name="knowledge-document-detail",
    ),
]
