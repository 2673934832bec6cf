"""REST endpoint of the alerts: `GET /api/v1/alerts` — the caller's workspace's alerts, newest first, paged
by `before` (the `seq` of the last item), filtered by `state` (`raised` or `resolved`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, Field
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from foundation.api_errors import invalid_fields, query_int
from platforms.alerts.evaluator import alert_out
from platforms.alerts.models import Alert
from platforms.alerts.selectors import alert_list

PAGE_DEFAULT, PAGE_MAX = 50, 100


class AlertOut(BaseModel):
    alert_id: UUID
    seq: int = Field(description="Cursor: pass it as `before` for the next (older) page.")
    kind: str = Field(
        description="bot.connection | bot.deliveries | binding.failure_rate | queue.wait | provider.errors"
    )
    subject: str = Field(description="The bot's, binding's or provider's id, or `queue`.")
    state: Literal["raised", "resolved"]
    raised_at: datetime
    resolved_at: datetime | None
    details: dict[str, Any]


class AlertPageOut(BaseModel):
    items: list[AlertOut]
    has_more: bool


class AlertListApi(APIView):
    required_scopes = {"GET": "runs:read"}

    @extend_schema(
        operation_id="alerts_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("state", OpenApiTypes.STR, enum=["raised", "resolved"]),
            OpenApiParameter("before", OpenApiTypes.INT),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"1 to {PAGE_MAX} (default {PAGE_DEFAULT})."),
        ],
        responses=AlertPageOut,
    )
    def get(self, request: Request) -> Response:
        state = request.query_params.get("state")
        if state is not None and state not in Alert.State.values:
            raise invalid_fields({"state": "Must be raised or resolved."})
        limit = query_int(request.query_params, "limit", default=PAGE_DEFAULT, low=1, high=PAGE_MAX)
        before = query_int(request.query_params, "before", default=None, low=1)
        alerts = list(alert_list(workspace=request_workspace(request), state=state, before=before)[: limit + 1])
        items = [{**alert_out(a), "seq": a.pk} for a in alerts[:limit]]
        return Response({"items": items, "has_more": len(alerts) > limit})
