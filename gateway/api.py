"""REST endpoints of the Event Gateway (docs/architecture.md, "The REST API"): `POST /api/v1/events[?wait=]` and
`GET /api/v1/events/{event_id}`.

The events body is read by `EventJSONParser` with its own size limit (`LANGBOT_MAX_EVENT_BYTES`), so an
oversize body answers 413 `payload_too_large` instead of tripping Django's upload limit, and malformed
JSON answers 400 `invalid_json`. Everything is scoped to the caller's workspace.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from django.db import OperationalError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, Field, ValidationError
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from foundation.api_errors import ApiError, field_errors, invalid_fields
from foundation.api_input import refuse_unstorable_text
from foundation.db_unavailable import database_unavailable
from gateway.envelope import EventEnvelopeIn
from gateway.services import RateLimitedError, event_ingest
from runners.lifecycle import services as run_services
from runners.lifecycle.api import RunSummaryOut, run_summary_out
from runners.models import Run
from runners.selectors import runs_of_event
from transcripts.models import EventLog
from transcripts.selectors import event_get

logger = logging.getLogger(__name__)

WAIT_MAX_SECONDS = 300


# --- output shapes ------------------------------------------------------------------------------------


class RoutingErrorOut(BaseModel):
    code: str = Field(description="`binding.conflict` when replying bindings tie.")
    message: str
    details: dict[str, Any]


class EventAcceptedOut(BaseModel):
    event_id: str
    duplicate: bool = Field(description="True when this event_id was accepted before; the runs are the earlier ones.")
    status: Literal["accepted", "no_binding", "conflict", "held"]
    conversation_id: str
    runs: list[RunSummaryOut]
    error: RoutingErrorOut | None = Field(default=None, description="Present only when routing failed.")


class EventOut(BaseModel):
    event_id: str
    event_type: str
    source: str
    source_event_type: str | None
    bot_id: str | None
    conversation_id: str
    thread_id: str | None
    actor: dict[str, Any] | None
    subject: dict[str, Any] | None
    input: dict[str, Any]
    input_summary: str
    data: dict[str, Any]
    raw_ref: dict[str, Any] | None = Field(description="`{artifact_id, size, mime_type}` of a raw payload kept apart.")
    status: Literal["accepted", "no_binding", "conflict", "held"]
    error: RoutingErrorOut | None
    event_time: datetime | None
    created_at: datetime
    runs: list[RunSummaryOut]


def event_accepted_out(event: EventLog, runs: list[Run], *, duplicate: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "event_id": event.event_id,
        "duplicate": duplicate,
        "status": event.status,
        "conversation_id": event.conversation_id,
        "runs": [run_summary_out(r) for r in runs],
    }
    if event.error:
        body["error"] = event.error
    return body


def event_out(event: EventLog, runs: list[Run]) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "event_type": event.event_type,
        "source": event.source,
        "source_event_type": event.source_event_type or None,
        "bot_id": event.bot.bot_id if event.bot else None,
        "conversation_id": event.conversation_id,
        "thread_id": event.thread_id or None,
        "actor": event.actor,
        "subject": event.subject,
        "input": event.input,
        "input_summary": event.input_summary,
        "data": event.data,
        "raw_ref": event.raw_ref,
        "status": event.status,
        "error": event.error,
        "event_time": event.event_time.isoformat() if event.event_time else None,
        "created_at": event.created_at.isoformat(),
        "runs": [run_summary_out(r) for r in runs],
    }


# --- request parsing -----------------------------------------------------------------------------------


def _too_large() -> ApiError:
    limit = settings.LANGBOT_MAX_EVENT_BYTES
    return ApiError(
        413,
        "payload_too_large",
        f"The event body exceeds {limit} bytes; send large payloads as artifacts.",
        {"max_bytes": limit},
    )


class EventJSONParser(JSONParser):
    """JSON with the gateway's own size cap. It reads at most one byte past the cap, so a huge body costs
    no memory, and it never goes through `HttpRequest.body` (whose DATA_UPLOAD_MAX_MEMORY_SIZE check
    would answer with a bare 400)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = settings.LANGBOT_MAX_EVENT_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise _too_large()
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            raise exceptions.ParseError(f"Malformed JSON: {exc}") from None
        return refuse_unstorable_text(data)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _declared_length(request: Request) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _wait_seconds(request: Request) -> float:
    value = request.query_params.get("wait")
    if value is None or value == "":
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        raise invalid_fields({"wait": "Must be a number of seconds."}) from None
    if not math.isfinite(seconds) or not 0 <= seconds <= WAIT_MAX_SECONDS:
        raise invalid_fields({"wait": f"Must be between 0 and {WAIT_MAX_SECONDS} seconds."})
    return seconds


# --- views -----------------------------------------------------------------------------------------------


class EventIngestApi(APIView):
    required_scopes = {"POST": "events:write"}

    parser_classes = [EventJSONParser]

    @extend_schema(
        operation_id="events_create",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter(
                "wait",
                OpenApiTypes.NUMBER,
                description=(
                    f"Hold the response up to this many seconds (0–{WAIT_MAX_SECONDS}) until the runs end: the "
                    "answer is 200 when every run ended within the wait, 202 while any is still queued or running."
                ),
            ),
        ],
        request=EventEnvelopeIn,
        responses={
            202: OpenApiResponse(
                EventAcceptedOut,
                description="Accepted; without `wait`, or with runs still queued or running when the wait ran out.",
            ),
            200: OpenApiResponse(
                EventAcceptedOut,
                description=(
                    "With `wait`: every run of the event ended within the wait (their final status and output "
                    "are in `runs`). Also when the event_id was seen before (`duplicate: true`)."
                ),
            ),
            400: OpenApiResponse(description="`invalid_argument` with details.fields, or `invalid_json`"),
            413: OpenApiResponse(description="`payload_too_large`"),
        },
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        wait = _wait_seconds(request)
        if _declared_length(request) > settings.LANGBOT_MAX_EVENT_BYTES:
            raise _too_large()
        if not request.content_type and _declared_length(request) > 0:
            raise exceptions.UnsupportedMediaType("", detail="Send the event as Content-Type: application/json.")
        body = request.data
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_argument", "The body must be a JSON object.", {"fields": {}})
        try:
            envelope = EventEnvelopeIn.model_validate(body)
        except ValidationError as exc:
            raise invalid_fields(field_errors(exc)) from None
        try:
            result = event_ingest(workspace=workspace, envelope=envelope)
        except RateLimitedError as exc:
            # 429 `rate_limited` with Retry-After, as the REST throttle answers; nothing was stored.
            raise exceptions.Throttled(wait=exc.retry_after, detail=exc.message) from None
        runs = result.runs
        ended = False
        if wait > 0 and runs:
            # After commit (event_ingest's transaction is closed): the workers can see the runs.
            try:
                run_services.runs_wait(run_ids=[str(r.run_id) for r in runs], timeout=wait)
                runs = runs_of_event(event=result.event)
                ended = all(run.is_terminal for run in runs)
            except OperationalError as exc:
                if not database_unavailable(exc):
                    raise
                # The event is in: answer as a wait that ran out, with the runs as ingested, rather than
                # a 503 that a client without an event_id would retry as a second event.
                logger.warning("?wait= ended early: no database connection free to read the runs (%s)", exc)
        return Response(
            event_accepted_out(result.event, runs, duplicate=result.duplicate),
            status=status.HTTP_200_OK if result.duplicate or ended else status.HTTP_202_ACCEPTED,
        )


class EventDetailApi(APIView):
    required_scopes = {"GET": "events:read"}

    @extend_schema(operation_id="events_retrieve", parameters=[WORKSPACE_PARAMETER], responses=EventOut)
    def get(self, request: Request, event_id: str) -> Response:
        event = event_get(workspace=request_workspace(request), event_id=event_id)
        if event is None:
            raise ApiError(404, "not_found", f"No event {event_id!r} in this workspace.")
        return Response(event_out(event, runs_of_event(event=event)))
