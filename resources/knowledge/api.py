"""REST endpoints of knowledge bases (docs/architecture.md, "The REST API"): `/api/v1/knowledge-bases[/{kb_id}]` and
their documents, `/api/v1/knowledge-bases/{kb_id}/documents[/{document_id}]`.

Everything is scoped to the caller's workspace; another workspace's knowledge base or document answers 404.
An upload answers 202 with the queued document; a worker ingests it and the document's `status`,
`progress` and `error` say how that goes. Uploads above `KNOWLEDGE_DOCUMENT_MAX_BYTES` answer 413
`payload_too_large` (refused from the declared length before the body is parsed, or as soon as the
streamed file passes the cap); a type no parser reads answers 415 `unsupported_media_type`; a copy of a
document the knowledge base already holds (the same SHA-256, not failed) answers 409
`knowledge.document_duplicate` naming it.

`POST /api/v1/knowledge-bases/{kb_id}/search` is the hit test (`resources.knowledge.hit_test`): the ranked
chunks a run's retrieval would get for a query, with their scores and documents.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.models import Workspace
from foundation.api_errors import ApiError, invalid_fields
from foundation.api_input import MultiPartParser, body_parse
from resources.knowledge.hit_test import QUERY_MAX_CHARS, HitTestError, SearchMode, knowledge_base_hit_test
from resources.knowledge.parsing import SUPPORTED_TYPES
from resources.knowledge.search import MAX_TOP_K
from resources.knowledge.selectors import (
    knowledge_base_get,
    knowledge_base_list,
    knowledge_document_get,
    knowledge_document_list,
)
from resources.knowledge.services import (
    DocumentDuplicateError,
    DocumentTypeUnsupportedError,
    knowledge_base_create,
    knowledge_base_delete,
    knowledge_base_update,
    knowledge_document_delete,
    knowledge_document_upload,
)
from resources.knowledge.specs import KnowledgeBaseIn, KnowledgeBasePatchIn
from resources.knowledge.uploads import DocumentTooLargeError, UploadLimitHandler, declared_length_check
from resources.models import KnowledgeBase, KnowledgeDocument

DocumentStatus = str
_INVALID = OpenApiResponse(description="`invalid_argument` with details.fields")


class KnowledgeBaseOut(BaseModel):
    kb_id: str
    name: str
    description: str
    embedding_model_id: str | None
    document_count: int
    created_at: datetime
    updated_at: datetime


class KnowledgeBaseListOut(BaseModel):
    items: list[KnowledgeBaseOut]


class KnowledgeDocumentOut(BaseModel):
    document_id: str
    kb_id: str
    name: str
    mime_type: str = Field(description="The parser's type: text/plain, text/markdown, text/html, PDF or DOCX.")
    size: int
    status: str = Field(description="queued | processing | ready | failed")
    progress: int = Field(description="0–100")
    error: str = Field(description="Why ingestion failed; empty otherwise.")
    page_count: int
    chunk_count: int
    artifact_id: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    processed_at: datetime | None


class KnowledgeDocumentListOut(BaseModel):
    items: list[KnowledgeDocumentOut]


class KnowledgeSearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=QUERY_MAX_CHARS)
    top_k: int = Field(default=5, ge=1, le=MAX_TOP_K)
    mode: SearchMode | None = Field(
        default=None,
        description="full_text, vector (needs an embedding model) or hybrid; by default what a run gets: hybrid "
        "with an embedding model, full_text without.",
    )


class KnowledgeHitOut(BaseModel):
    rank: int = Field(description="1 for the best.")
    score: float = Field(
        description="The ranking's score (full text: the engine's relevance; vector: the cosine; hybrid: the fused "
        "score). Compare hits of one answer, not of different queries."
    )
    chunk_id: str
    document_id: str
    document_name: str
    position: int = Field(description="The chunk's place in its document (0 first).")
    content: str
    full_text_score: float | None
    vector_score: float | None
    metadata: dict[str, Any] = Field(description="The chunk's page, heading and the document's upload metadata.")


class KnowledgeSearchOut(BaseModel):
    query: str
    mode: str = Field(description="The mode the ranking used: full_text when a hybrid query's embedding failed.")
    hits: list[KnowledgeHitOut] = Field(description="Best first.")
    embedding_error: str | None = Field(description="Why the query's embedding failed (then full text alone).")


def knowledge_base_out(knowledge_base: KnowledgeBase) -> dict[str, Any]:
    model = knowledge_base.embedding_model
    return {
        "kb_id": knowledge_base.kb_id,
        "name": knowledge_base.name,
        "description": knowledge_base.description,
        "embedding_model_id": model.model_id if model is not None else None,
        "document_count": getattr(knowledge_base, "document_count", None) or knowledge_base.documents.count(),
        "created_at": knowledge_base.created_at.isoformat(),
        "updated_at": knowledge_base.updated_at.isoformat(),
    }


def knowledge_document_out(document: KnowledgeDocument, *, kb_id: str) -> dict[str, Any]:
    return {
        "document_id": str(document.document_id),
        "kb_id": kb_id,
        "name": document.name,
        "mime_type": document.mime_type,
        "size": document.size,
        "status": document.status,
        "progress": document.progress,
        "error": document.error,
        "page_count": document.page_count,
        "chunk_count": document.chunk_count,
        "artifact_id": str(document.artifact.artifact_id) if document.artifact is not None else None,
        "metadata": document.metadata,
        "created_at": document.created_at.isoformat(),
        "updated_at": document.updated_at.isoformat(),
        "processed_at": document.processed_at.isoformat() if document.processed_at else None,
    }


def _kb_or_404(workspace: Workspace, kb_id: str) -> KnowledgeBase:
    knowledge_base = knowledge_base_get(workspace=workspace, kb_id=kb_id)
    if knowledge_base is None:
        raise ApiError(404, "not_found", f"No knowledge base {kb_id!r} in this workspace.")
    return knowledge_base


def _document_or_404(knowledge_base: KnowledgeBase, document_id: uuid.UUID) -> KnowledgeDocument:
    document = knowledge_document_get(knowledge_base=knowledge_base, document_id=document_id)
    if document is None:
        raise ApiError(404, "not_found", f"No document {document_id} in knowledge base {knowledge_base.kb_id!r}.")
    return document


def _too_large(exc: DocumentTooLargeError) -> ApiError:
    return ApiError(
        413, "payload_too_large", f"{exc} Split it or raise KNOWLEDGE_DOCUMENT_MAX_BYTES.", {"limit_bytes": exc.limit}
    )


class KnowledgeBaseListApi(APIView):
    required_scopes = {"GET": "knowledge:read", "POST": "knowledge:write"}

    @extend_schema(
        operation_id="knowledge_bases_list", parameters=[WORKSPACE_PARAMETER], responses=KnowledgeBaseListOut
    )
    def get(self, request: Request) -> Response:
        items = knowledge_base_list(workspace=request_workspace(request))
        return Response({"items": [knowledge_base_out(kb) for kb in items]})

    @extend_schema(
        operation_id="knowledge_bases_create",
        parameters=[WORKSPACE_PARAMETER],
        request=KnowledgeBaseIn,
        responses={201: KnowledgeBaseOut, 400: _INVALID},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(KnowledgeBaseIn, request.data)
        knowledge_base = knowledge_base_create(workspace=workspace, spec=spec)
        return Response(knowledge_base_out(knowledge_base), status=status.HTTP_201_CREATED)


class KnowledgeBaseDetailApi(APIView):
    required_scopes = {"GET": "knowledge:read", "PATCH": "knowledge:write", "DELETE": "knowledge:write"}

    @extend_schema(
        operation_id="knowledge_bases_retrieve", parameters=[WORKSPACE_PARAMETER], responses=KnowledgeBaseOut
    )
    def get(self, request: Request, kb_id: str) -> Response:
        return Response(knowledge_base_out(_kb_or_404(request_workspace(request), kb_id)))

    @extend_schema(
        operation_id="knowledge_bases_update",
        parameters=[WORKSPACE_PARAMETER],
        request=KnowledgeBasePatchIn,
        responses={200: KnowledgeBaseOut, 400: _INVALID},
    )
    def patch(self, request: Request, kb_id: str) -> Response:
        workspace = request_workspace(request)
        knowledge_base = _kb_or_404(workspace, kb_id)
        patch = body_parse(KnowledgeBasePatchIn, request.data)
        knowledge_base_update(knowledge_base=knowledge_base, patch=patch)
        return Response(knowledge_base_out(_kb_or_404(workspace, kb_id)))

    @extend_schema(operation_id="knowledge_bases_destroy", parameters=[WORKSPACE_PARAMETER], responses={204: None})
    def delete(self, request: Request, kb_id: str) -> Response:
        knowledge_base_delete(knowledge_base=_kb_or_404(request_workspace(request), kb_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class KnowledgeDocumentListApi(APIView):
    required_scopes = {"GET": "knowledge:read", "POST": "knowledge:write"}

    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="knowledge_documents_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("status", OpenApiTypes.STR, enum=KnowledgeDocument.Status.values),
        ],
        responses=KnowledgeDocumentListOut,
    )
    def get(self, request: Request, kb_id: str) -> Response:
        knowledge_base = _kb_or_404(request_workspace(request), kb_id)
        wanted = request.query_params.get("status") or None
        if wanted is not None and wanted not in KnowledgeDocument.Status.values:
            raise invalid_fields({"status": f"One of {', '.join(KnowledgeDocument.Status.values)}."})
        documents = knowledge_document_list(knowledge_base=knowledge_base, status=wanted)
        return Response({"items": [knowledge_document_out(d, kb_id=kb_id) for d in documents]})

    @extend_schema(
        operation_id="knowledge_documents_upload",
        parameters=[WORKSPACE_PARAMETER],
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "name": {"type": "string", "description": "Defaults to the file's name."},
                    "metadata": {
                        "type": "string",
                        "description": "A JSON object of flat values, copied to every chunk (retrieval filters).",
                    },
                },
                "required": ["file"],
            }
        },
        responses={
            202: KnowledgeDocumentOut,
            400: _INVALID,
            409: OpenApiResponse(description="`knowledge.document_duplicate`: the same bytes are already a document"),
            413: OpenApiResponse(description="`payload_too_large`: over KNOWLEDGE_DOCUMENT_MAX_BYTES"),
            415: OpenApiResponse(description=f"`unsupported_media_type`: supported are {', '.join(SUPPORTED_TYPES)}"),
        },
    )
    def post(self, request: Request, kb_id: str) -> Response:
        knowledge_base = _kb_or_404(request_workspace(request), kb_id)
        limit = int(settings.KNOWLEDGE_DOCUMENT_MAX_BYTES)
        try:
            declared_length_check(request.META, limit=limit)
            # Before the body is parsed: the handler stops the parse as soon as the file passes the cap.
            request.upload_handlers = [UploadLimitHandler(limit), *request.upload_handlers]
            upload = request.FILES.get("file")
        except DocumentTooLargeError as exc:
            raise _too_large(exc) from None
        if upload is None:
            raise invalid_fields({"file": "Send the document as the multipart field `file`."})
        if upload.size is not None and upload.size > limit:
            raise _too_large(DocumentTooLargeError(limit=limit, size=upload.size))
        metadata: Any = None
        raw_metadata = str(request.data.get("metadata") or "")
        if raw_metadata:
            try:
                metadata = json.loads(raw_metadata)
            except ValueError:
                raise invalid_fields({"metadata": "Must be a JSON object."}) from None
        name = str(request.data.get("name") or upload.name or "document")
        if len(name) > 255:
            raise invalid_fields({"name": "At most 255 characters."})
        try:
            document = knowledge_document_upload(
                knowledge_base=knowledge_base,
                file=upload,
                name=name,
                mime_type=str(upload.content_type or ""),
                metadata=metadata,
            )
        except DocumentDuplicateError as exc:
            raise ApiError(
                409,
                "knowledge.document_duplicate",
                f"Not added: {exc}. Delete that document first to upload it again.",
                {"document_id": str(exc.existing.document_id), "name": exc.existing.name},
            ) from None
        except DocumentTypeUnsupportedError as exc:
            raise ApiError(
                415,
                "unsupported_media_type",
                f"Cannot ingest {exc}: supported are text, Markdown, HTML, PDF and DOCX.",
                {"supported": SUPPORTED_TYPES},
            ) from None
        return Response(knowledge_document_out(document, kb_id=kb_id), status=status.HTTP_202_ACCEPTED)


class KnowledgeDocumentDetailApi(APIView):
    required_scopes = {"GET": "knowledge:read", "DELETE": "knowledge:write"}

    @extend_schema(
        operation_id="knowledge_documents_retrieve", parameters=[WORKSPACE_PARAMETER], responses=KnowledgeDocumentOut
    )
    def get(self, request: Request, kb_id: str, document_id: uuid.UUID) -> Response:
        document = _document_or_404(_kb_or_404(request_workspace(request), kb_id), document_id)
        return Response(knowledge_document_out(document, kb_id=kb_id))

    @extend_schema(operation_id="knowledge_documents_destroy", parameters=[WORKSPACE_PARAMETER], responses={204: None})
    def delete(self, request: Request, kb_id: str, document_id: uuid.UUID) -> Response:
        document = _document_or_404(_kb_or_404(request_workspace(request), kb_id), document_id)
        knowledge_document_delete(document=document)
        return Response(status=status.HTTP_204_NO_CONTENT)


class KnowledgeBaseSearchApi(APIView):
    required_scopes = {"POST": "knowledge:read"}  # a hit test reads the knowledge base (bindings.roles)

    @extend_schema(
        operation_id="knowledge_bases_search",
        parameters=[WORKSPACE_PARAMETER],
        request=KnowledgeSearchIn,
        responses={
            200: KnowledgeSearchOut,
            400: _INVALID,
            502: OpenApiResponse(description="`provider.error`: a vector query whose embedding call failed"),
        },
        description="The hit test: the chunks a run's retrieval would get for `query`, best first, with scores.",
    )
    def post(self, request: Request, kb_id: str) -> Response:
        knowledge_base = _kb_or_404(request_workspace(request), kb_id)
        search = body_parse(KnowledgeSearchIn, request.data)
        try:
            answer = knowledge_base_hit_test(
                knowledge_base=knowledge_base, query=search.query, top_k=search.top_k, mode=search.mode
            )
        except HitTestError as exc:
            if exc.code == "provider.error":
                raise ApiError(502, exc.code, str(exc)) from None
            raise invalid_fields({exc.field: str(exc)}) from None
        return Response(
            {
                "query": answer.query,
                "mode": answer.mode,
                "hits": [dataclasses.asdict(hit) for hit in answer.hits],
                "embedding_error": answer.embedding_error,
            }
        )
