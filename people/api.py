"""REST endpoints of people (README "People"): `GET /api/v1/persons`, `GET /api/v1/persons/{person_id}` (everything
stored about the person, counted, with their memory and usage), `GET …/export` (one zip archive, streamed) and
`POST …/erase`. Another workspace's person answers 404. Viewing, exporting and erasing are audited
(`PersonAudit`, the admin's Person audit)."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, Field
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from foundation.api_errors import ApiError, query_int
from people.data import person_erase, person_export_stream, person_inventory, person_out
from people.models import Person, PersonAudit

PERSON_PAGE_LIMIT_MAX = 200


class IdentityOut(BaseModel):
    channel: str = Field(description="The bot's platform (`telegram`, `slack` …), `webui` or `api`.")
    actor_type: str
    actor_id: str
    actor_name: str
    linked_at: str


class PersonOut(BaseModel):
    person_id: str
    display_name: str
    created_at: str
    last_seen_at: str | None
    identities: list[IdentityOut]


class PersonPageOut(BaseModel):
    items: list[PersonOut]
    next_before: int | None = Field(description="Pass as `before` for the next page; null on the last.")


class PersonDetailOut(PersonOut):
    counts: dict[str, int]
    memory: list[dict[str, Any]] = Field(description="The runners' person memory (state keys `memory…`).")
    usage: dict[str, Any] = Field(description="Runs by status and the tokens their usage adds up to.")


class PersonErasedOut(BaseModel):
    person_id: str
    erased: dict[str, int] = Field(description="What went; `runs_kept` runs stay with their status and usage.")


def _caller(request: Request) -> str:
    user = request.user
    return user.get_username() if hasattr(user, "get_username") else str(user)


def _person_or_404(request: Request, person_id: str) -> Person:
    workspace = request_workspace(request)
    found = None
    try:
        parsed = uuid.UUID(person_id)
    except ValueError:
        parsed = None
    if parsed is not None:
        found = Person.objects.filter(workspace=workspace, person_id=parsed).first()
    if found is None:
        raise ApiError(404, "not_found", f"No person {person_id!r} in this workspace.")
    return found


class PersonListApi(APIView):
    required_scopes = {"GET": "persons:read"}

    @extend_schema(
        operation_id="persons_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("before", OpenApiTypes.INT, description="Cursor: `next_before` of the previous page."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"1–{PERSON_PAGE_LIMIT_MAX}, default 50."),
        ],
        responses=PersonPageOut,
        description="The workspace's persons, newest first, with their linked identities.",
    )
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        params = request.query_params
        before = query_int(params, "before", default=None, low=1, high=None)
        limit = query_int(params, "limit", default=50, low=1, high=PERSON_PAGE_LIMIT_MAX)
        rows = Person.objects.filter(workspace=workspace).prefetch_related("identities").order_by("-pk")
        if before is not None:
            rows = rows.filter(pk__lt=before)
        page = list(rows[: limit + 1])
        more = len(page) > limit
        page = page[:limit]
        return Response({"items": [person_out(p) for p in page], "next_before": page[-1].pk if more and page else None})


class PersonDetailApi(APIView):
    required_scopes = {"GET": "persons:read"}

    @extend_schema(
        operation_id="persons_retrieve",
        parameters=[WORKSPACE_PARAMETER],
        responses={200: PersonDetailOut, 404: OpenApiResponse(description="`not_found`")},
        description="Everything stored about the person, counted: events, transcript items, state entries, "
        "artifacts; their memory and usage. Audited.",
    )
    def get(self, request: Request, person_id: str) -> Response:
        person = _person_or_404(request, person_id)
        PersonAudit.objects.create(
            workspace_id=person.workspace_id,
            person_id=person.person_id,
            action=PersonAudit.Action.VIEWED,
            actor=_caller(request),
        )
        return Response(person_inventory(person))


class PersonExportApi(APIView):
    required_scopes = {"GET": "persons:write"}

    @extend_schema(
        operation_id="persons_export",
        parameters=[WORKSPACE_PARAMETER],
        responses={
            (200, "application/zip"): OpenApiResponse(
                OpenApiTypes.BINARY, description="`person.json` and `artifacts/{artifact_id}` blobs."
            ),
            404: OpenApiResponse(description="`not_found`"),
        },
        description="The person's data as one zip archive, streamed. Audited.",
    )
    def get(self, request: Request, person_id: str) -> StreamingHttpResponse:
        person = _person_or_404(request, person_id)
        response = StreamingHttpResponse(
            person_export_stream(person, by=_caller(request)), content_type="application/zip"
        )
        response["Content-Disposition"] = f'attachment; filename="person-{person.person_id}.zip"'
        return response


class PersonEraseApi(APIView):
    required_scopes = {"POST": "persons:write"}

    @extend_schema(
        operation_id="persons_erase",
        parameters=[WORKSPACE_PARAMETER],
        request=None,
        responses={200: PersonErasedOut, 404: OpenApiResponse(description="`not_found`")},
        description="Erase the person: transcripts redacted, state and artifacts (with their blobs) deleted, "
        "runs kept with their status and usage only; the person and their identities go. Audited.",
    )
    def post(self, request: Request, person_id: str) -> Response:
        person = _person_or_404(request, person_id)
        erased_id = str(person.person_id)
        counts = person_erase(person, by=_caller(request))
        return Response({"person_id": erased_id, "erased": counts})
