"""REST endpoints for schedules (docs/architecture.md, "The REST API"): `/api/v1/schedules[/{schedule_id}]`.

Everything is scoped to the caller's workspace; another workspace's schedule answers 404, and a bot or
binding of another workspace is refused as one this workspace does not have (400 `invalid_argument`
naming `bot_id` / `binding_id`). Bodies are parsed by the strict models of `platforms.schedules.specs`;
a bad cron expression or time zone answers 400 naming `cron` / `timezone`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from pydantic import BaseModel, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.models import Workspace
from foundation.api_errors import ApiError
from foundation.api_input import body_parse
from platforms.schedules.models import Schedule
from platforms.schedules.selectors import schedule_get, schedule_list
from platforms.schedules.services import (
    schedule_conversation_id,
    schedule_create,
    schedule_delete,
    schedule_fields,
    schedule_update,
)
from platforms.schedules.specs import ScheduleIn, SchedulePatchIn

_INVALID = OpenApiResponse(description="`invalid_argument` with details.fields")


class ScheduleOut(BaseModel):
    schedule_id: str
    name: str
    cron: str
    timezone: str
    enabled: bool
    bot_id: str | None
    binding_id: str | None
    event_type: str
    input_text: str
    chat_id: str | None
    conversation_id: str = Field(description="The conversation of the events (the one given, or its default).")
    last_fired_at: datetime | None = Field(description="The tick last posted (the scheduled time, not the send time).")
    last_event_id: str | None = Field(description="The event of that tick: `GET /api/v1/events/{event_id}`.")
    last_error: str | None = Field(description="Why the last tick posted nothing, if it did; cleared by a good tick.")
    last_error_at: datetime | None
    created_at: datetime
    updated_at: datetime


class ScheduleListOut(BaseModel):
    items: list[ScheduleOut]


def schedule_out(schedule: Schedule) -> dict[str, Any]:
    return {
        "schedule_id": schedule.schedule_id,
        **schedule_fields(schedule),
        "conversation_id": schedule_conversation_id(schedule),
        "last_fired_at": schedule.last_fired_at.isoformat() if schedule.last_fired_at else None,
        "last_event_id": schedule.last_event_id or None,
        "last_error": schedule.last_error or None,
        "last_error_at": schedule.last_error_at.isoformat() if schedule.last_error_at else None,
        "created_at": schedule.created_at.isoformat(),
        "updated_at": schedule.updated_at.isoformat(),
    }


def _schedule_or_404(workspace: Workspace, schedule_id: str) -> Schedule:
    schedule = schedule_get(workspace=workspace, schedule_id=schedule_id)
    if schedule is None:
        raise ApiError(404, "not_found", f"No schedule {schedule_id!r} in this workspace.")
    return schedule


class ScheduleListApi(APIView):
    required_scopes = {"GET": "schedules:read", "POST": "schedules:write"}

    @extend_schema(operation_id="schedules_list", parameters=[WORKSPACE_PARAMETER], responses=ScheduleListOut)
    def get(self, request: Request) -> Response:
        schedules = schedule_list(workspace=request_workspace(request))
        return Response({"items": [schedule_out(s) for s in schedules]})

    @extend_schema(
        operation_id="schedules_create",
        parameters=[WORKSPACE_PARAMETER],
        request=ScheduleIn,
        responses={201: ScheduleOut, 400: _INVALID},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(ScheduleIn, request.data)
        schedule = schedule_create(workspace=workspace, spec=spec)
        return Response(schedule_out(schedule), status=status.HTTP_201_CREATED)


class ScheduleDetailApi(APIView):
    required_scopes = {"GET": "schedules:read", "PATCH": "schedules:write", "DELETE": "schedules:write"}

    @extend_schema(operation_id="schedules_retrieve", parameters=[WORKSPACE_PARAMETER], responses=ScheduleOut)
    def get(self, request: Request, schedule_id: str) -> Response:
        return Response(schedule_out(_schedule_or_404(request_workspace(request), schedule_id)))

    @extend_schema(
        operation_id="schedules_update",
        parameters=[WORKSPACE_PARAMETER],
        request=SchedulePatchIn,
        responses={200: ScheduleOut, 400: _INVALID},
    )
    def patch(self, request: Request, schedule_id: str) -> Response:
        schedule = _schedule_or_404(request_workspace(request), schedule_id)
        patch = body_parse(SchedulePatchIn, request.data)
        return Response(schedule_out(schedule_update(schedule=schedule, patch=patch)))

    @extend_schema(operation_id="schedules_destroy", parameters=[WORKSPACE_PARAMETER], responses={204: None})
    def delete(self, request: Request, schedule_id: str) -> Response:
        schedule_delete(schedule=_schedule_or_404(request_workspace(request), schedule_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
