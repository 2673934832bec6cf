"""Celery tasks of the resources app: thin, taking ids, each calling one service that is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from resources.knowledge.ingestion import knowledge_document_ingest as _document_ingest
from resources.mcp.refresh import mcp_server_connect_run, mcp_server_refresh_run


@shared_task(acks_late=True, ignore_result=True)
def knowledge_document_ingest(document_id: str) -> None:
    # The service claims the document with a conditional update: a redelivery finds nothing to do.
    _document_ingest(document_id=document_id)


@shared_task(acks_late=True, ignore_result=True)
def mcp_server_refresh(server_pk: int, token: str) -> None:
    # A refresh asked from the web: a stdio server starts here, in the worker, never in the web process.
    mcp_server_refresh_run(server_pk=server_pk, token=token)


@shared_task(acks_late=True, ignore_result=True)
def mcp_server_connect(server_pk: int, version: str) -> None:
    # After a save that changes how a server connects: the worker connects and lists its tools, the save
    # having answered already. `version` fences out a save superseded by a later one.
    mcp_server_connect_run(server_pk=server_pk, version=version)
