"""REST endpoints of budgets and costs (README, "Cost and budgets"): `/api/v1/budgets[/{budget_id}]` and
`/api/v1/costs` (model spend per UTC day, per workspace, bot or actor). A run's own cost is on the run
(`usage.host.cost`, `GET /api/v1/runs/{run_id}`).

Everything is the caller's workspace's; another workspace's budget answers 404. Amounts and costs are
decimal strings in the host's cost currency, named beside them (`currency`).
"""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta
from typing import Literal, cast

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.models import Workspace
from foundation.api_errors import ApiError, invalid_fields
from foundation.api_input import body_parse
from runners.access.budgets import utc_today
from runners.costs import (
    BudgetIn,
    BudgetPatchIn,
    BudgetValidationError,
    GroupBy,
    budget_create,
    budget_get,
    budget_list,
    budget_out,
    budget_update,
    costs_by_day,
)
from runners.models import Budget

COSTS_DAYS_DEFAULT = 30
COSTS_DAYS_MAX = 366
_INVALID = OpenApiResponse(description="`invalid_argument` with details.fields")


class BudgetOut(BaseModel):
    budget_id: str
    scope: Literal["workspace", "bot", "actor"]
    bot_id: str | None
    actor_id: str = Field(description="For an actor budget: `type:id`; empty: each actor alike.")
    period: Literal["day", "month"]
    amount: str = Field(description="A decimal string in `currency`.")
    currency: str
    enabled: bool
    name: str
    spent: str = Field(description="Spent in the current period (an each-actor budget: the most one actor spent).")
    period_start: date
    resets_at: datetime
    created_at: datetime
    updated_at: datetime


class BudgetListOut(BaseModel):
    items: list[BudgetOut]


class CostOut(BaseModel):
    day: date
    workspace: str
    bot_id: str | None = Field(default=None, description="With group_by=bot (null: runs without a bot).")
    actor_id: str | None = Field(default=None, description="With group_by=actor (null: events without an actor).")
    cost: str = Field(description="A decimal string in `currency`; model calls of unpriced models add nothing.")
    currency: str
    prompt_tokens: int
    completion_tokens: int
    calls: int


class CostListOut(BaseModel):
    currency: str
    items: list[CostOut]


def _budget_or_404(workspace: Workspace, budget_id: str) -> Budget:
    try:
        key = uuid.UUID(budget_id)
    except ValueError:
        key = None
    budget = budget_get(workspace=workspace, budget_id=key) if key is not None else None
    if budget is None:
        raise ApiError(404, "not_found", f"No budget {budget_id!r} in this workspace.")
    return budget


class BudgetListApi(APIView):
    required_scopes = {"GET": "budgets:read", "POST": "budgets:write"}

    @extend_schema(
        operation_id="budgets_list",
        parameters=[WORKSPACE_PARAMETER],
        responses=BudgetListOut,
    )
    def get(self, request: Request) -> Response:
        return Response({"items": [budget_out(b) for b in budget_list(workspace=request_workspace(request))]})

    @extend_schema(
        operation_id="budgets_create",
        parameters=[WORKSPACE_PARAMETER],
        request=BudgetIn,
        responses={201: BudgetOut, 400: _INVALID},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(BudgetIn, request.data)
        try:
            budget = budget_create(workspace=workspace, spec=spec)
        except BudgetValidationError as exc:
            raise invalid_fields(exc.fields) from None
        return Response(budget_out(budget), status=status.HTTP_201_CREATED)


class BudgetDetailApi(APIView):
    required_scopes = {"GET": "budgets:read", "PATCH": "budgets:write", "DELETE": "budgets:write"}

    @extend_schema(operation_id="budgets_retrieve", parameters=[WORKSPACE_PARAMETER], responses=BudgetOut)
    def get(self, request: Request, budget_id: str) -> Response:
        return Response(budget_out(_budget_or_404(request_workspace(request), budget_id)))

    @extend_schema(
        operation_id="budgets_update",
        parameters=[WORKSPACE_PARAMETER],
        request=BudgetPatchIn,
        responses={200: BudgetOut, 400: _INVALID},
    )
    def patch(self, request: Request, budget_id: str) -> Response:
        budget = _budget_or_404(request_workspace(request), budget_id)
        patch = body_parse(BudgetPatchIn, request.data)
        try:
            budget = budget_update(budget=budget, patch=patch)
        except BudgetValidationError as exc:
            raise invalid_fields(exc.fields) from None
        return Response(budget_out(budget))

    @extend_schema(operation_id="budgets_destroy", parameters=[WORKSPACE_PARAMETER], responses={204: None})
    def delete(self, request: Request, budget_id: str) -> Response:
        _budget_or_404(request_workspace(request), budget_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


def _query_day(request: Request, name: str, default: date) -> date:
    value = request.query_params.get(name)
    if not value:
        return default
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise invalid_fields({name: "Must be a date, YYYY-MM-DD."}) from None


class CostListApi(APIView):
    required_scopes = {"GET": "budgets:read"}

    @extend_schema(
        operation_id="costs_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("since", OpenApiTypes.DATE, description="First UTC day (default: 29 days before until)."),
            OpenApiParameter("until", OpenApiTypes.DATE, description="Last UTC day (default: today)."),
            OpenApiParameter("group_by", OpenApiTypes.STR, enum=["workspace", "bot", "actor"]),
        ],
        responses={200: CostListOut, 400: _INVALID},
    )
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        group_by = request.query_params.get("group_by") or "workspace"
        if group_by not in ("workspace", "bot", "actor"):
            raise invalid_fields({"group_by": "Must be workspace, bot or actor."})
        until = _query_day(request, "until", utc_today())
        since = _query_day(request, "since", until - timedelta(days=COSTS_DAYS_DEFAULT - 1))
        if since > until or (until - since).days >= COSTS_DAYS_MAX:
            raise invalid_fields({"since": f"Must be on or before until, at most {COSTS_DAYS_MAX} days before it."})
        items = costs_by_day(
            workspaces=Workspace.objects.filter(pk=workspace.pk),
            since=since,
            until=until,
            group_by=cast(GroupBy, group_by),
        )
        return Response({"currency": settings.LANGBOT_COST_CURRENCY, "items": items})
