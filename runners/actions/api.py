"""REST endpoints for platform action requests and their approval (`GET /api/v1/actions`,
`GET /api/v1/actions/{action_id}`, `POST /api/v1/actions/{action_id}/approve`, `POST .../reject`).

Scoped to the caller's workspace: another workspace's request, like a malformed id, answers 404. Any key
of the workspace may decide — the same key may already turn approval off in the binding's policy. A
decision on a request that is no longer pending answers 409 with why: `action.not_pending` (decided or
expired before), `action.run_ended` (its run ended and it may not outlive it: recorded as expired),
`action.expired` (nobody decided in time).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, Field
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from foundation.api_errors import ApiError, invalid_fields, query_int
from runners.actions.platform_actions import (
    DecisionOutcome,
    platform_action_approve,
    platform_action_get,
    platform_action_page,
    platform_action_reject,
)
from runners.models import PlatformActionRequest

ACTION_PAGE_LIMIT_MAX = 100

ActionStatus = Literal["pending_approval", "executed", "refused", "rejected", "failed", "expired"]


class ActionOut(BaseModel):
    action_id: int = Field(description="The `request_id` the runner was answered with.")
    run_id: str
    runner_id: str
    binding_id: str
    surface: str
    origin: Literal["proxy", "result"]
    action: str
    target: dict[str, Any]
    payload: dict[str, Any]
    status: ActionStatus
    error: dict[str, Any] | None = Field(
        description="`{code, message}`: the delivery's error, or why it expired (`expired`, `run_ended`)."
    )
    result: dict[str, Any]
    may_outlive_run: bool = Field(description="An approval after the run ended may still execute it.")
    expires_at: datetime | None
    decided_by: str
    decided_at: datetime | None
    executed_at: datetime | None
    created_at: datetime


class ActionPageOut(BaseModel):
    items: list[ActionOut] = Field(description="Newest first.")
    next_before: int | None = Field(description="Cursor of the next (older) page; null on the last page.")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def action_out(request: PlatformActionRequest) -> dict[str, Any]:
    return {
        "action_id": request.pk,
        "run_id": str(request.run.run_id),
        "runner_id": request.runner_id,
        "binding_id": request.binding_key,
        "surface": request.surface,
        "origin": request.origin,
        "action": request.action,
        "target": request.target,
        "payload": request.payload,
        "status": request.status,
        "error": request.error,
        "result": request.result or {},
        "may_outlive_run": request.may_outlive_run,
        "expires_at": _iso(request.expires_at),
        "decided_by": request.decided_by,
        "decided_at": _iso(request.decided_at),
        "executed_at": _iso(request.executed_at),
        "created_at": request.created_at.isoformat(),
    }


def _action_or_404(request: Request, action_id: str) -> PlatformActionRequest:
    workspace = request_workspace(request)
    found = None
    if action_id.isdigit() and int(action_id) < 2**63:
        found = platform_action_get(workspace_id=workspace.pk, request_id=int(action_id))
    if found is None:
        raise ApiError(404, "not_found", f"No platform action {action_id!r} in this workspace.")
    return found


def _decided_or_409(outcome: DecisionOutcome) -> Response:
    found = outcome.request
    if outcome.decided:
        return Response(action_out(found))
    code = (found.error or {}).get("code") if found.status == PlatformActionRequest.Status.EXPIRED else None
    details = {"status": found.status, "action": action_out(found)}
    if code == "run_ended":
        raise ApiError(
            409,
            "action.run_ended",
            "Not executed: its run had ended, and the runner did not say the action may outlive its run. "
            "Recorded as expired.",
            details,
        )
    if code == "expired":
        raise ApiError(409, "action.expired", "Not executed: nobody decided in time; it expired.", details)
    raise ApiError(409, "action.not_pending", f"The request is no longer pending ({found.status}).", details)


_DECISION_RESPONSES = {
    200: ActionOut,
    404: OpenApiResponse(description="`not_found`: no such request in this workspace"),
    409: OpenApiResponse(
        description="`action.run_ended`, `action.expired` or `action.not_pending`: nothing was executed"
    ),
}


class ActionListApi(APIView):
    required_scopes = {"GET": "actions:read"}

    @extend_schema(
        operation_id="actions_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("status", OpenApiTypes.STR, enum=list(PlatformActionRequest.Status.values)),
            OpenApiParameter("run_id", OpenApiTypes.UUID),
            OpenApiParameter("before", OpenApiTypes.INT, description="Cursor: `next_before` of the previous page."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"1–{ACTION_PAGE_LIMIT_MAX}, default 50."),
        ],
        responses=ActionPageOut,
        description="The workspace's platform action requests; `?status=pending_approval` lists what waits "
        "for a decision (requests whose time ran out are expired first).",
    )
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        params = request.query_params
        status = params.get("status") or None
        if status is not None and status not in PlatformActionRequest.Status.values:
            raise invalid_fields({"status": f"Must be one of: {', '.join(PlatformActionRequest.Status.values)}."})
        run_id = params.get("run_id") or None
        if run_id is not None:
            try:
                run_id = str(uuid.UUID(run_id))
            except ValueError:
                raise invalid_fields({"run_id": "Must be a run id (a UUID)."}) from None
        items, next_before = platform_action_page(
            workspace_id=workspace.pk,
            status=status,
            run_id=run_id,
            before=query_int(params, "before", default=None, low=1, high=None),
            limit=query_int(params, "limit", default=50, low=1, high=ACTION_PAGE_LIMIT_MAX),
        )
        return Response({"items": [action_out(item) for item in items], "next_before": next_before})


class ActionDetailApi(APIView):
    required_scopes = {"GET": "actions:read"}

    @extend_schema(operation_id="actions_retrieve", parameters=[WORKSPACE_PARAMETER], responses=ActionOut)
    def get(self, request: Request, action_id: str) -> Response:
        return Response(action_out(_action_or_404(request, action_id)))


class ActionApproveApi(APIView):
    required_scopes = {"POST": "actions:write"}

    @extend_schema(
        operation_id="actions_approve",
        parameters=[WORKSPACE_PARAMETER],
        request=None,
        responses=_DECISION_RESPONSES,
        description="Approve a pending request: it executes now through the run's platform; the answer is the "
        "request with `status` `executed` or `failed` (the delivery's error).",
    )
    def post(self, request: Request, action_id: str) -> Response:
        found = _action_or_404(request, action_id)
        return _decided_or_409(platform_action_approve(request=found, operator=str(request.user)))


class ActionRejectApi(APIView):
    required_scopes = {"POST": "actions:write"}

    @extend_schema(
        operation_id="actions_reject",
        parameters=[WORKSPACE_PARAMETER],
        request=None,
        responses=_DECISION_RESPONSES,
        description="Reject a pending request: it is never executed; the runner sees `rejected`.",
    )
    def post(self, request: Request, action_id: str) -> Response:
        found = _action_or_404(request, action_id)
        return _decided_or_409(platform_action_reject(request=found, operator=str(request.user)))
