"""Ingestion of one document, as the Celery task runs it: queued → processing → ready | failed.

The task claims the document with a conditional update, so a second delivery of the same task finds
nothing to do; a document left `processing` by a worker that died is claimable again once its progress
has not moved for `STALE_PROCESSING`. Progress is written as it goes (outside any transaction, so the
API shows it): parsed, chunked, each embedding batch. The chunks — with their vectors when the knowledge
base has an embedding model — are written in one transaction with the `ready` status and the knowledge
base's new index version and term counts: a document's chunks are searchable all at once or not at all. A document
deleted or queued again meanwhile is left alone.

Parsing runs in a child process held to a memory and a time limit (resources/knowledge/isolation.py), with
the `ParseLimits` the settings give: a document that expands without bound fails alone, and the worker,
which also runs agents, keeps its memory.

Every failure ends as `failed` with a message for the operator (an unreadable file, an embedding
provider's error); an unexpected one is logged with its traceback and never escapes to crash the worker.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from artifacts.services import artifact_read_bytes
from resources.knowledge.chunking import Chunk, document_chunk
from resources.knowledge.isolation import document_parse_isolated
from resources.knowledge.limits import ParseLimits
from resources.knowledge.parsing import DocumentRejectedError, ParsedDocument
from resources.knowledge.term_counts import term_counts_document_add, term_counts_document_subtract
from resources.knowledge.terms import search_terms_of
from resources.knowledge.vectors import vector_index_sync_on_commit
from resources.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument
from resources.providers.embeddings import texts_embed
from resources.providers.failures import ProviderCallError

logger = logging.getLogger(__name__)

STALE_PROCESSING = timedelta(minutes=10)
Status = KnowledgeDocument.Status
# Where progress stands after each stage; embeddings fill the span between chunked and stored.
PROGRESS_CLAIMED, PROGRESS_PARSED, PROGRESS_CHUNKED, PROGRESS_EMBEDDED = 5, 20, 30, 95
INSERT_BATCH = 500


def _claim(document_id: str) -> bool:
    now = timezone.now()
    claimable = Q(status=Status.QUEUED) | Q(status=Status.PROCESSING, updated_at__lt=now - STALE_PROCESSING)
    claimed = KnowledgeDocument.objects.filter(claimable, document_id=document_id).update(
        status=Status.PROCESSING, progress=PROGRESS_CLAIMED, error="", updated_at=now
    )
    return claimed == 1


def _progress(document: KnowledgeDocument, value: int) -> None:
    KnowledgeDocument.objects.filter(pk=document.pk, status=Status.PROCESSING).update(
        progress=value, updated_at=timezone.now()
    )


def _fail(document: KnowledgeDocument, message: str) -> None:
    KnowledgeDocument.objects.filter(pk=document.pk, status=Status.PROCESSING).update(
        status=Status.FAILED, error=message[:2000], updated_at=timezone.now(), processed_at=timezone.now()
    )


def _parsed(document: KnowledgeDocument, data: bytes) -> ParsedDocument:
    limits = ParseLimits(
        max_expanded_bytes=settings.LANGBOT_KB_MAX_EXPANDED_BYTES,
        max_zip_entries=settings.LANGBOT_KB_MAX_ZIP_ENTRIES,
        max_compression_ratio=settings.LANGBOT_KB_MAX_COMPRESSION_RATIO,
        max_pdf_pages=settings.LANGBOT_KB_MAX_PDF_PAGES,
        max_characters=settings.LANGBOT_KB_MAX_CHARACTERS,
    )
    return document_parse_isolated(
        data=data,
        name=document.name,
        mime_type=document.mime_type,
        limits=limits,
        memory_mb=settings.LANGBOT_KB_PARSE_MEMORY_MB,
        timeout_seconds=settings.LANGBOT_KB_PARSE_TIMEOUT_SECONDS,
    )


def _embedding_input(chunk: Chunk) -> str:
    # The section's heading gives a passage the context an embedding model needs to place it.
    heading = chunk.metadata.get("heading")
    return f"{heading}\n\n{chunk.text}" if heading else chunk.text


def _store(document: KnowledgeDocument, chunks: list[Chunk], vectors: list[np.ndarray] | None, pages: int) -> bool:
    with transaction.atomic():
        current = KnowledgeDocument.objects.select_for_update().filter(pk=document.pk).first()
        if current is None or current.status != Status.PROCESSING:
            return False
        # The knowledge base's row is locked from here to commit: its term counts change with the chunks.
        KnowledgeBase.objects.filter(pk=current.knowledge_base_id).update(index_version=F("index_version") + 1)
        vector_index_sync_on_commit(current.knowledge_base_id)
        term_counts_document_subtract(document_pk=current.pk)
        KnowledgeChunk.objects.filter(document=current).delete()
        rows = []
        for position, chunk in enumerate(chunks):
            heading = " ".join(chunk.metadata.get("headings", []))
            rows.append(
                KnowledgeChunk(
                    workspace_id=current.workspace_id,
                    knowledge_base_id=current.knowledge_base_id,
                    document=current,
                    position=position,
                    text=chunk.text,
                    metadata={**current.metadata, **chunk.metadata},
                    token_count=chunk.token_count,
                    embedding=vectors[position].astype(np.float32).tobytes() if vectors is not None else None,
                    # Heading words make a section findable by its title, which the passage may not repeat.
                    search_terms=f"{heading} {search_terms_of(chunk.text + ' ' + heading)}".strip(),
                )
            )
        KnowledgeChunk.objects.bulk_create(rows, batch_size=INSERT_BATCH)
        term_counts_document_add(document_pk=current.pk)
        now = timezone.now()
        KnowledgeDocument.objects.filter(pk=current.pk).update(
            status=Status.READY, progress=100, error="", chunk_count=len(rows), page_count=pages,
            processed_at=now, updated_at=now,
        )  # fmt: skip
    return True


def knowledge_document_ingest(*, document_id: str) -> None:
    if not _claim(document_id):
        return
    document = KnowledgeDocument.objects.select_related("artifact", "knowledge_base__embedding_model__provider").get(
        document_id=document_id
    )
    try:
        if document.artifact is None:
            raise DocumentRejectedError("The document's content is gone (its artifact was deleted).")
        try:
            data = artifact_read_bytes(artifact=document.artifact)
        except OSError as exc:
            raise DocumentRejectedError(f"The document's content cannot be read from storage: {exc}") from exc
        parsed = _parsed(document, data)
        del data  # the upload is not needed past parsing; embedding may take a while
        _progress(document, PROGRESS_PARSED)
        chunks = document_chunk(parsed.blocks)
        _progress(document, PROGRESS_CHUNKED)
        model = document.knowledge_base.embedding_model
        vectors = None
        if model is not None and chunks:
            span = PROGRESS_EMBEDDED - PROGRESS_CHUNKED

            def embedded(done: int) -> None:
                _progress(document, PROGRESS_CHUNKED + span * done // len(chunks))

            try:
                vectors = texts_embed(model=model, texts=[_embedding_input(c) for c in chunks], progress=embedded)
            except ProviderCallError as exc:
                raise DocumentRejectedError(f"The embedding model {model.model_id!r} failed: {exc}") from exc
        _store(document, chunks, vectors, parsed.page_count)
    except DocumentRejectedError as exc:
        _fail(document, str(exc))
    except Exception:
        logger.exception("ingestion of knowledge document %s failed", document_id)
        _fail(document, "Ingestion failed on an internal error; the worker's log has the details.")
