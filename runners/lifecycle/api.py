"""REST endpoints for runner discovery (`GET /api/v1/runners`, `POST /api/v1/runners/refresh`) and for
runs (`GET /api/v1/runs`, `GET /api/v1/runs/{run_id}`, `GET /api/v1/runs/{run_id}/events`,
`POST /api/v1/runs/{run_id}/cancel`).

Runs are scoped to the caller's workspace: another workspace's run, like a malformed run id, answers 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace, require_operator
from bindings.api import WORKSPACE_PARAMETER
from bindings.models import RunnerDescriptor
from bindings.selectors import runner_descriptor_list
from foundation.api_errors import ApiError, field_errors, invalid_fields, query_int
from langbot_sdk.protocol import AgentAPIException
from runners.lifecycle import services as run_services
from runners.lifecycle.retry import run_attempt
from runners.models import Run
from runners.selectors import (
    RUN_PAGE_LIMIT_MAX,
    input_event_ids,
    run_events_page,
    run_get,
    run_page,
    runs_citations,
)
from runtimes.catalog import runner_descriptors_refresh


class RunnerOutputSerializer(serializers.ModelSerializer[RunnerDescriptor]):
    plugin = serializers.SerializerMethodField()
    context = serializers.JSONField(source="context_policy")  # type: ignore[assignment]

    class Meta:
        model = RunnerDescriptor
        fields = [
            "runner_id",
            "plugin",
            "runner_name",
            "label",
            "description",
            "capabilities",
            "permissions",
            "context",
            "config_schema",
            "manifest_sha256",
            "status",
            "load_error",
            "last_seen_at",
        ]

    def get_plugin(self, obj: RunnerDescriptor) -> dict[str, str]:
        return {"author": obj.plugin_author, "name": obj.plugin_name, "version": obj.plugin_version}


class RunnerListQuerySerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=RunnerDescriptor.Status.choices, required=False)


class RunnerListApi(APIView):
    required_scopes = {"GET": "runners:read"}

    @extend_schema(
        parameters=[RunnerListQuerySerializer],
        responses=inline_serializer("RunnerList", {"items": RunnerOutputSerializer(many=True)}),
    )
    def get(self, request: Request) -> Response:
        query = RunnerListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        runners = runner_descriptor_list(
            workspace=request_workspace(request), status=query.validated_data.get("status")
        )
        return Response({"items": RunnerOutputSerializer(runners, many=True).data})


class RunnerRefreshApi(APIView):
    required_scopes = {"POST": "runners:write"}
    host_wide = True  # the view's own operator check decides for sessions

    @extend_schema(
        request=None,
        responses=inline_serializer(
            "RunnerRefresh",
            {
                "items": RunnerOutputSerializer(many=True),
                "missing": serializers.ListField(child=serializers.CharField()),
                "plugin_errors": serializers.ListField(child=serializers.DictField()),
                "plugin_warnings": serializers.ListField(child=serializers.DictField()),
            },
        ),
        description="Re-reads the runner catalog from the plugin runtime. Operators only: an API key with the "
        "operator scope or a staff session; others get 403 `forbidden`.",
    )
    def post(self, request: Request) -> Response:
        require_operator(request)
        try:
            result = runner_descriptors_refresh(connect_wait=0)
        except AgentAPIException as exc:
            raise ApiError(503, "runtime.unavailable", exc.error.message) from exc
        return Response(
            {
                "items": RunnerOutputSerializer(
                    runner_descriptor_list(workspace=request_workspace(request)), many=True
                ).data,
                "missing": result.missing,
                "plugin_errors": result.plugin_errors,
                "plugin_warnings": result.plugin_warnings,
            }
        )


# --- runs -------------------------------------------------------------------------------------------------

RunStatus = Literal["queued", "running", "completed", "failed", "cancelled", "timeout"]


class RunSummaryOut(BaseModel):
    run_id: str
    binding_id: str
    runner_id: str
    status: RunStatus
    status_reason: str
    is_observer: bool
    error: dict[str, Any] | None
    output: str = Field(description="The reply text once the run completed; empty before.")


class RunOut(BaseModel):
    run_id: str
    status: RunStatus
    status_reason: str
    error: dict[str, Any] | None
    usage: dict[str, Any] | None
    output: str
    binding_id: str
    runner_id: str
    conversation_id: str
    thread_id: str | None
    event_id: str
    is_observer: bool
    streaming: bool | None = Field(
        description="Whether `message.delta` results will come: the runner streams and the surface takes deltas. "
        "False for a runner that declares `streaming: false` (its reply comes whole); null until the run starts."
    )
    cancel_requested_at: datetime | None
    not_before: datetime | None = Field(
        description="Under the `merge` policy: the run is not started before then (the quiet window after the "
        "latest message folded into it); null otherwise."
    )
    input_events: list[str] = Field(
        description="Ids of the later events whose messages this run took as input, in order: folded into it "
        "before it started (`merge`) or handed to it while it ran (`steer`). Its own event is `event_id`."
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    deadline_at: datetime | None


class RunDetailOut(RunOut):
    attempt: int = Field(
        description="1 for the event's first run of the binding; 2, 3, ... for automatic retries "
        "(the binding's delivery_policy.retry)."
    )
    retry_of: str | None = Field(description="The run this one retried, if it is a retry.")
    citations: list[dict[str, Any]] = Field(
        description="What the reply drew on, as the runner gave it in `run.completed.metadata.citations` (e.g. the "
        "knowledge chunks of the local agent: `kb_id`, `document_name`, `score`, `excerpt`); [] when it gave none."
    )


class RunPageOut(BaseModel):
    items: list[RunOut] = Field(description="Newest first.")
    next_before: int | None = Field(description="Cursor of the next (older) page; null on the last page.")


class RunEventOut(BaseModel):
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime


class RunEventPageOut(BaseModel):
    items: list[RunEventOut]
    has_more: bool


class RunCancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="cancelled by API request", min_length=1, max_length=200)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def run_summary_out(run: Run) -> dict[str, Any]:
    return {
        "run_id": str(run.run_id),
        "binding_id": run.binding_key,
        "runner_id": run.runner_id,
        "status": run.status,
        "status_reason": run.status_reason,
        "is_observer": run.is_observer,
        "error": run.error,
        "output": run.output,
    }


def run_out(run: Run, event_ids: dict[int, str] | None = None) -> dict[str, Any]:
    """`RunOut` of `run`; `event_ids` from `input_event_ids` when many runs are shown at once."""
    if event_ids is None:
        event_ids = input_event_ids([run])
    return {
        "run_id": str(run.run_id),
        "status": run.status,
        "status_reason": run.status_reason,
        "error": run.error,
        "usage": run.usage,
        "output": run.output,
        "binding_id": run.binding_key,
        "runner_id": run.runner_id,
        "conversation_id": run.conversation_id,
        "thread_id": run.thread_id or None,
        "event_id": run.event.event_id,
        "is_observer": run.is_observer,
        # Whether to expect `message.delta` results: the runner streams and the delivery takes deltas (None
        # until the run starts). A runner declaring `streaming: false` sends its reply whole.
        "streaming": ((run.authorization or {}).get("delivery") or {}).get("streaming"),
        "cancel_requested_at": _iso(run.cancel_requested_at),
        "not_before": _iso(run.not_before),
        "input_events": [event_ids[pk] for pk in run.input_events or [] if pk in event_ids],
        "created_at": run.created_at.isoformat(),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "deadline_at": _iso(run.deadline_at),
    }


def _run_or_404(request: Request, run_id: str) -> Run:
    run = run_get(workspace=request_workspace(request), run_id=run_id)
    if run is None:
        raise ApiError(404, "not_found", f"No run {run_id!r} in this workspace.")
    return run


class RunListApi(APIView):
    required_scopes = {"GET": "runs:read"}

    @extend_schema(
        operation_id="runs_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("conversation_id", OpenApiTypes.STR),
            OpenApiParameter("status", OpenApiTypes.STR, enum=[s.value for s in Run.Status]),
            OpenApiParameter("binding_id", OpenApiTypes.STR),
            OpenApiParameter("before", OpenApiTypes.INT, description="Cursor: `next_before` of the previous page."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"1–{RUN_PAGE_LIMIT_MAX}, default 50."),
        ],
        responses=RunPageOut,
    )
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        params = request.query_params
        run_status = params.get("status") or None
        if run_status is not None and run_status not in Run.Status.values:
            raise invalid_fields({"status": f"Must be one of: {', '.join(Run.Status.values)}."})
        before = query_int(request.query_params, "before", default=0, low=1, high=None)
        page = run_page(
            workspace=workspace,
            conversation_id=params.get("conversation_id") or None,
            status=run_status,
            binding_id=params.get("binding_id") or None,
            before=before or None,
            limit=query_int(request.query_params, "limit", default=50, low=1, high=RUN_PAGE_LIMIT_MAX),
        )
        event_ids = input_event_ids(page.items)
        return Response({"items": [run_out(r, event_ids) for r in page.items], "next_before": page.next_before})


class RunDetailApi(APIView):
    required_scopes = {"GET": "runs:read"}

    @extend_schema(operation_id="runs_retrieve", parameters=[WORKSPACE_PARAMETER], responses=RunDetailOut)
    def get(self, request: Request, run_id: str) -> Response:
        run = _run_or_404(request, run_id)
        attempt = run_attempt(run=run)
        citations = runs_citations([run])[run.pk]
        return Response(
            {**run_out(run), "attempt": attempt.number, "retry_of": attempt.retry_of, "citations": citations}
        )


class RunEventListApi(APIView):
    required_scopes = {"GET": "runs:read"}

    @extend_schema(
        operation_id="runs_events_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("after_seq", OpenApiTypes.INT, description="Only results with a larger seq."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"1–{RUN_PAGE_LIMIT_MAX}, default 100."),
        ],
        responses=RunEventPageOut,
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = _run_or_404(request, run_id)
        page = run_events_page(
            run=run,
            after_seq=query_int(request.query_params, "after_seq", default=0, low=0, high=None),
            limit=query_int(request.query_params, "limit", default=RUN_PAGE_LIMIT_MAX, low=1, high=RUN_PAGE_LIMIT_MAX),
        )
        items = [
            {"seq": e.seq, "type": e.type, "data": e.data, "created_at": e.created_at.isoformat()} for e in page.items
        ]
        return Response({"items": items, "has_more": page.has_more})


class RunCancelApi(APIView):
    required_scopes = {"POST": "runs:write"}

    @extend_schema(
        operation_id="runs_cancel",
        parameters=[WORKSPACE_PARAMETER],
        request=RunCancelIn,
        responses={
            200: RunOut,
            409: OpenApiResponse(description="`run.finished`: the run already ended"),
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = _run_or_404(request, run_id)
        body = request.data if request.data else {}
        try:
            cancel = RunCancelIn.model_validate(body)
        except ValidationError as exc:
            raise invalid_fields(field_errors(exc)) from None
        if run.is_terminal:
            raise ApiError(409, "run.finished", f"The run already ended ({run.status}).", {"status": run.status})
        run = run_services.run_cancel_request(run=run, reason=cancel.reason)
        # Re-read with the event for the answer: the service may have returned a bare row.
        return Response(run_out(_run_or_404(request, str(run.run_id))))
