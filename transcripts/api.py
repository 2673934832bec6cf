"""REST endpoints of the conversation facts: `GET /api/v1/conversations/{conversation_id}/transcript`, scoped
to the caller's workspace (docs/architecture.md, "The REST API"). (The events API is the gateway's: `gateway.api`.)
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, Field
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from foundation.api_errors import query_int
from transcripts.models import TranscriptItem
from transcripts.selectors import PAGE_LIMIT_MAX, transcript_page

logger = logging.getLogger(__name__)

WAIT_MAX_SECONDS = 300


# --- output shapes ------------------------------------------------------------------------------------


class TranscriptItemOut(BaseModel):
    id: int = Field(description="The cursor: pass the last one as `before` for older items.")
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    contents: list[dict[str, Any]]
    artifacts: list[dict[str, Any]]
    thread_id: str | None
    event_id: str | None
    run_id: str | None
    runner_id: str | None
    actor: dict[str, Any] | None
    created_at: datetime


class TranscriptPageOut(BaseModel):
    conversation_id: str
    items: list[TranscriptItemOut] = Field(description="Newest first.")
    next_before: int | None = Field(description="Cursor of the next (older) page; null at the beginning.")


def transcript_item_out(item: TranscriptItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "role": item.role,
        "content": item.content,
        "contents": item.contents,
        "artifacts": item.artifacts,
        "thread_id": item.thread_id or None,
        "event_id": item.event.event_id if item.event else None,
        "run_id": str(item.run_id) if item.run_id else None,
        "runner_id": item.runner_id or None,
        "actor": item.actor,
        "created_at": item.created_at.isoformat(),
    }


# --- views -----------------------------------------------------------------------------------------------


class ConversationTranscriptApi(APIView):
    required_scopes = {"GET": "conversations:read"}

    @extend_schema(
        operation_id="conversations_transcript",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("before", OpenApiTypes.INT, description="Only items older than this cursor."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"1–{PAGE_LIMIT_MAX}, default 50."),
        ],
        responses=TranscriptPageOut,
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        workspace = request_workspace(request)
        before = query_int(request.query_params, "before", default=None, low=1, high=None)
        limit = query_int(request.query_params, "limit", default=50, low=1, high=PAGE_LIMIT_MAX) or 50
        page = transcript_page(workspace=workspace, conversation_id=conversation_id, before=before, limit=limit)
        return Response(
            {
                "conversation_id": conversation_id,
                "items": [transcript_item_out(i) for i in page.items],
                "next_before": page.next_before,
            }
        )
