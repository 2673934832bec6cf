"""Celery tasks of the resources app: thin, taking ids, each calling one service that is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from resources.knowledge.ingestion import knowledge_document_ingest as _document_ingest


@shared_task(acks_late=True, ignore_result=True)
def knowledge_document_ingest(document_id: str) -> None:
    # The service claims the document with a conditional update: a redelivery finds nothing to do.
    _document_ingest(document_id=document_id)
