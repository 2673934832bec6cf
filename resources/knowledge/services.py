"""Writes for knowledge bases and their documents, shared by the REST API and the admin: create, change
and delete knowledge bases; accept a document upload (stored as an artifact, ingested by a Celery task
sent after commit); delete a document with its chunks, index rows and artifact.

Deleting removes blobs only once the rows are gone for good (after commit), so a rolled-back delete never
leaves a document pointing at nothing.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from typing import Any

from django.core.files.base import File
from django.db import IntegrityError, transaction
from django.db.models import F
from pydantic import ValidationError

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_file
from artifacts.storage import artifact_storage
from bindings.models import Workspace
from foundation.api_errors import field_errors
from foundation.ids import free_slug
from resources.knowledge.parsing import document_type
from resources.knowledge.specs import KnowledgeBaseIn, KnowledgeBasePatchIn
from resources.knowledge.term_counts import term_counts_document_subtract
from resources.knowledge.vectors import vector_index_sync_on_commit
from resources.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument, Model
from resources.services import ResourceValidationError

DOCUMENT_METADATA_MAX_KEYS = 32


class DocumentTypeUnsupportedError(Exception):
    """The upload is of a type no parser reads."""


class DocumentDuplicateError(Exception):
    """The knowledge base already holds a document of the same bytes (same SHA-256), queued, being ingested
    or ready: a second copy would only return every passage of it twice. A copy whose ingestion failed does
    not count, so the same file can be uploaded again after a failure."""

    def __init__(self, existing: KnowledgeDocument):
        super().__init__(f"{existing.name!r} has the same content (document {existing.document_id})")
        self.existing = existing


def upload_sha256(file: File[bytes]) -> str:
    """The SHA-256 of an upload, read in chunks (the artifact reads it again to store it)."""
    file.seek(0)
    digest = hashlib.sha256()
    for chunk in file.chunks():
        digest.update(chunk)
    file.seek(0)
    return digest.hexdigest()


def knowledge_document_duplicate(*, knowledge_base: KnowledgeBase, sha256: str) -> KnowledgeDocument | None:
    """The document of the knowledge base with these bytes that counts as a duplicate (see
    `DocumentDuplicateError`), if any."""
    return (
        KnowledgeDocument.objects.filter(knowledge_base=knowledge_base, artifact__sha256=sha256)
        .exclude(status=KnowledgeDocument.Status.FAILED)
        .order_by("created_at", "id")
        .first()
    )


def _embedding_model(*, workspace: Workspace, model_id: str | None) -> Model | None:
    if model_id is None:
        return None
    model = Model.objects.filter(workspace=workspace, model_id=model_id).select_related("provider").first()
    if model is None:
        raise ResourceValidationError({"embedding_model_id": f"There is no model {model_id!r} in this workspace."})
    if model.kind != Model.Kind.EMBEDDING:
        raise ResourceValidationError(
            {"embedding_model_id": f"Model {model_id!r} is a {model.kind} model; an embedding model is needed."}
        )
    return model


def knowledge_base_fields(knowledge_base: KnowledgeBase) -> dict[str, Any]:
    """A knowledge base as its input shape (without the id): what a PATCH merges into."""
    model = knowledge_base.embedding_model
    return {
        "name": knowledge_base.name,
        "description": knowledge_base.description,
        "embedding_model_id": model.model_id if model is not None else None,
    }


@transaction.atomic
def knowledge_base_create(*, workspace: Workspace, spec: KnowledgeBaseIn) -> KnowledgeBase:
    def taken(kb_id: str) -> bool:
        return KnowledgeBase.objects.filter(workspace=workspace, kb_id=kb_id).exists()

    if spec.kb_id is not None and taken(spec.kb_id):
        raise ResourceValidationError({"kb_id": f"{spec.kb_id!r} already exists in this workspace."})
    knowledge_base = KnowledgeBase(
        workspace=workspace,
        kb_id=spec.kb_id or free_slug(base=spec.name, taken=taken, fallback="kb"),
        name=spec.name,
        description=spec.description,
        embedding_model=_embedding_model(workspace=workspace, model_id=spec.embedding_model_id),
    )
    try:
        with transaction.atomic():
            knowledge_base.save()
    except IntegrityError as exc:
        raise ResourceValidationError({"kb_id": f"{knowledge_base.kb_id!r} already exists in this workspace."}) from exc
    return knowledge_base


@transaction.atomic
def knowledge_base_update(*, knowledge_base: KnowledgeBase, patch: KnowledgeBasePatchIn) -> KnowledgeBase:
    """Apply a PATCH. A new embedding model makes the stored vectors meaningless: they are dropped and
    every document is ingested again; removing the model only drops them."""
    nulls = {
        n: "May not be null." for n in patch.model_fields_set - {"embedding_model_id"} if getattr(patch, n) is None
    }
    if nulls:
        raise ResourceValidationError(nulls)
    if patch.kb_id is not None and patch.kb_id != knowledge_base.kb_id:
        raise ResourceValidationError({"kb_id": "A knowledge base's id cannot be changed."})
    given = patch.model_dump(mode="json", include=patch.model_fields_set - {"kb_id"})
    try:
        spec = KnowledgeBaseIn.model_validate({**knowledge_base_fields(knowledge_base), **given})
    except ValidationError as exc:
        raise ResourceValidationError(field_errors(exc)) from None
    model = _embedding_model(workspace=knowledge_base.workspace, model_id=spec.embedding_model_id)
    model_changed = (model.pk if model else None) != knowledge_base.embedding_model_id
    knowledge_base.name = spec.name
    knowledge_base.description = spec.description
    knowledge_base.embedding_model = model
    knowledge_base.save()
    if model_changed:
        KnowledgeChunk.objects.filter(knowledge_base=knowledge_base).update(embedding=None)
        _index_changed(knowledge_base)
        if model is not None:
            documents_reingest(knowledge_base=knowledge_base)
    return knowledge_base


def documents_reingest(*, knowledge_base: KnowledgeBase) -> int:
    """Queue every document of the knowledge base for ingestion again (after commit); their current
    chunks stay searchable until the new ones replace them."""
    from resources.tasks import knowledge_document_ingest

    ids = [
        str(document_id)
        for document_id in KnowledgeDocument.objects.filter(knowledge_base=knowledge_base, artifact__isnull=False)
        .values_list("document_id", flat=True)
        .iterator()
    ]
    KnowledgeDocument.objects.filter(knowledge_base=knowledge_base, artifact__isnull=False).update(
        status=KnowledgeDocument.Status.QUEUED, progress=0, error=""
    )
    for document_id in ids:
        transaction.on_commit(functools.partial(knowledge_document_ingest.delay, document_id))
    return len(ids)


def _index_changed(knowledge_base: KnowledgeBase) -> None:
    KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(index_version=F("index_version") + 1)
    vector_index_sync_on_commit(knowledge_base.pk)


def _blobs_delete_on_commit(storage_keys: list[str]) -> None:
    def delete() -> None:
        storage = artifact_storage()
        for key in storage_keys:
            storage.delete(key)

    if storage_keys:
        transaction.on_commit(delete)


@transaction.atomic
def knowledge_base_delete(*, knowledge_base: KnowledgeBase) -> None:
    """Delete the knowledge base with its documents, chunks, index rows (its term counts go with its row, by
    a trigger) and the documents' artifacts."""
    # Read before the documents go: the documents are what point at the artifacts.
    artifact_pks = list(
        KnowledgeDocument.objects.filter(knowledge_base=knowledge_base, artifact__isnull=False).values_list(
            "artifact_id", flat=True
        )
    )
    artifacts = Artifact.objects.filter(pk__in=artifact_pks)
    keys = list(artifacts.values_list("storage_key", flat=True))
    # Chunks first in one statement: the cascade would otherwise collect them document by document.
    KnowledgeChunk.objects.filter(knowledge_base=knowledge_base).delete()
    pk = knowledge_base.pk
    knowledge_base.delete()
    vector_index_sync_on_commit(pk)  # the knowledge base is gone: its index files are removed
    artifacts.delete()
    _blobs_delete_on_commit(keys)


def _document_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    metadata = metadata or {}
    if not isinstance(metadata, dict) or len(metadata) > DOCUMENT_METADATA_MAX_KEYS:
        raise ResourceValidationError({"metadata": f"A JSON object of at most {DOCUMENT_METADATA_MAX_KEYS} keys."})
    for key, value in metadata.items():
        if not isinstance(value, str | int | float | bool) or len(str(key)) > 64 or "__" in str(key):
            raise ResourceValidationError(
                {f"metadata.{key}": "Keys of at most 64 characters (no '__'); values a string, number or boolean."}
            )
    return metadata


@transaction.atomic
def knowledge_document_upload(
    *,
    knowledge_base: KnowledgeBase,
    file: File[bytes],
    name: str,
    mime_type: str,
    metadata: dict[str, Any] | None = None,
) -> KnowledgeDocument:
    """Store the upload as an artifact and queue its ingestion (sent to a worker after commit). Refuses a
    copy of a document the knowledge base holds (`DocumentDuplicateError`)."""
    from resources.tasks import knowledge_document_ingest

    kind = document_type(name=name, mime_type=mime_type)
    if kind is None:
        raise DocumentTypeUnsupportedError(f"{mime_type or 'unknown type'} ({name})")
    document_metadata = _document_metadata(metadata)
    # Under the knowledge base's row lock, so two uploads of one file at once cannot both pass the check.
    KnowledgeBase.objects.select_for_update().filter(pk=knowledge_base.pk).first()
    existing = knowledge_document_duplicate(knowledge_base=knowledge_base, sha256=upload_sha256(file))
    if existing is not None:
        raise DocumentDuplicateError(existing)
    artifact = artifact_create_from_file(
        workspace=knowledge_base.workspace,
        file=file,
        name=name,
        mime_type=kind,
        conversation_id="",
        source=Artifact.Source.UPLOAD,
    )
    document = KnowledgeDocument.objects.create(
        document_id=uuid.uuid4(),
        workspace=knowledge_base.workspace,
        knowledge_base=knowledge_base,
        artifact=artifact,
        name=name[:255],
        mime_type=kind,
        size=artifact.size,
        metadata=document_metadata,
    )
    document_id = str(document.document_id)
    transaction.on_commit(lambda: knowledge_document_ingest.delay(document_id))
    return document


@transaction.atomic
def knowledge_document_delete(*, document: KnowledgeDocument) -> None:
    """Delete the document, its chunks (the full-text rows go with them) and its artifact; the knowledge
    base's vector caches see the change through its index version."""
    keys: list[str] = []
    if document.artifact_id is not None:
        artifact = Artifact.objects.filter(pk=document.artifact_id).first()
        if artifact is not None:
            keys.append(artifact.storage_key)
            document.artifact = None
            artifact.delete()
    knowledge_base = document.knowledge_base
    if KnowledgeChunk.objects.filter(document=document).exists():
        # Locks the knowledge base's row before its term counts change (as ingestion does).
        _index_changed(knowledge_base)
        term_counts_document_subtract(document_pk=document.pk)
        KnowledgeChunk.objects.filter(document=document).delete()
    document.delete()
    _blobs_delete_on_commit(keys)
