"""REST endpoints of artifacts (docs/architecture.md, "The REST API"): `POST /api/v1/artifacts` (multipart upload),
`GET /api/v1/artifacts/{id}` (metadata) and `GET /api/v1/artifacts/{id}/content` (bytes, HTTP Range).

Everything is scoped to the caller's workspace: another workspace's artifact, an expired one and a
malformed id all answer 404. Uploads above `LANGBOT_ARTIFACT_UPLOAD_MAX_BYTES` answer 413. Content is
streamed from storage in 64 KiB chunks; a single `bytes=` range answers 206 with `Content-Range`, an
unsatisfiable one 416 (`Content-Range: bytes */<size>`); several ranges are answered with the whole
content (200), which RFC 9110 allows.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, Field
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from artifacts.models import Artifact
from artifacts.selectors import artifact_get
from artifacts.services import artifact_create_from_file, artifact_iter_range
from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from foundation.api_errors import ApiError, invalid_fields
from foundation.api_input import MultiPartParser

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
EXPIRES_IN_MAX = 10 * 365 * 24 * 3600


class ArtifactOut(BaseModel):
    artifact_id: str
    name: str
    mime_type: str = Field(description="Sniffed from the content; the declared type is only a hint.")
    size: int
    sha256: str
    source: str
    conversation_id: str | None
    run_id: str | None
    created_at: datetime
    expires_at: datetime | None


def artifact_out(artifact: Artifact) -> dict[str, Any]:
    return ArtifactOut(
        artifact_id=str(artifact.artifact_id),
        name=artifact.name,
        mime_type=artifact.mime_type,
        size=artifact.size,
        sha256=artifact.sha256,
        source=artifact.source,
        conversation_id=artifact.conversation_id or None,
        run_id=str(artifact.run_id) if artifact.run_id else None,
        created_at=artifact.created_at,
        expires_at=artifact.expires_at,
    ).model_dump(mode="json")


def _not_found(artifact_id: str) -> ApiError:
    return ApiError(404, "not_found", f"No artifact {artifact_id!r} in this workspace.")


class ArtifactUploadApi(APIView):
    required_scopes = {"POST": "artifacts:write"}

    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="artifacts_upload",
        parameters=[WORKSPACE_PARAMETER],
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "name": {"type": "string"},
                    "mime_type": {"type": "string"},
                    "conversation_id": {"type": "string"},
                    "expires_in": {"type": "integer", "description": "Seconds until the artifact expires."},
                },
                "required": ["file"],
            }
        },
        responses={201: ArtifactOut, 400: OpenApiResponse(description="invalid_argument"), 413: None},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        upload = request.FILES.get("file")
        if upload is None:
            raise invalid_fields({"file": "Send the content as the multipart field `file`."})
        limit = settings.LANGBOT_ARTIFACT_UPLOAD_MAX_BYTES
        if upload.size is not None and upload.size > limit:
            raise ApiError(413, "payload_too_large", f"The file is {upload.size} bytes; the limit is {limit}.")
        expires_at = None
        expires_in = str(request.data.get("expires_in") or "")
        if expires_in:
            if not expires_in.isdigit() or not 1 <= int(expires_in) <= EXPIRES_IN_MAX:
                raise invalid_fields({"expires_in": f"Seconds between 1 and {EXPIRES_IN_MAX}."})
            expires_at = timezone.now() + timedelta(seconds=int(expires_in))
        conversation_id = str(request.data.get("conversation_id") or "")
        if len(conversation_id) > 255:
            raise invalid_fields({"conversation_id": "At most 255 characters."})
        artifact = artifact_create_from_file(
            workspace=workspace,
            file=upload,
            name=str(request.data.get("name") or upload.name or "upload"),
            mime_type=str(request.data.get("mime_type") or upload.content_type or ""),
            conversation_id=conversation_id,
            source=Artifact.Source.UPLOAD,
            expires_at=expires_at,
        )
        return Response(artifact_out(artifact), status=201)


class ArtifactDetailApi(APIView):
    required_scopes = {"GET": "artifacts:read"}

    @extend_schema(operation_id="artifacts_retrieve", parameters=[WORKSPACE_PARAMETER], responses=ArtifactOut)
    def get(self, request: Request, artifact_id: str) -> Response:
        artifact = artifact_get(workspace=request_workspace(request), artifact_id=artifact_id)
        if artifact is None:
            raise _not_found(artifact_id)
        return Response(artifact_out(artifact))


def byte_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """`(start, end)` inclusive for a satisfiable single range; None for no (or an ignored) range;
    False for an unsatisfiable one."""
    if not header:
        return None
    match = _RANGE.match(header.strip())
    if match is None:
        return None  # several ranges or another unit: answer with the whole content
    first, last = match.groups()
    if first == "" and last == "":
        return None
    if first == "":
        suffix = int(last)
        if suffix == 0 or size == 0:
            return False
        return max(0, size - suffix), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or (last and int(last) < start):
        return False
    return start, end


class ArtifactContentApi(APIView):
    required_scopes = {"GET": "artifacts:read"}

    @extend_schema(
        operation_id="artifacts_content",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("Range", OpenApiTypes.STR, OpenApiParameter.HEADER, description="e.g. bytes=0-1023"),
        ],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            (206, "application/octet-stream"): OpenApiTypes.BINARY,
            416: None,
        },
    )
    def get(self, request: Request, artifact_id: str) -> HttpResponse | StreamingHttpResponse:
        artifact = artifact_get(workspace=request_workspace(request), artifact_id=artifact_id)
        if artifact is None:
            raise _not_found(artifact_id)
        wanted = byte_range(request.headers.get("Range"), artifact.size)
        if wanted is False:
            refused = HttpResponse(status=416)
            refused["Content-Range"] = f"bytes */{artifact.size}"
            refused["Accept-Ranges"] = "bytes"
            return refused
        start, end = wanted if isinstance(wanted, tuple) else (0, artifact.size - 1)
        body = artifact_iter_range(artifact=artifact, start=start, end=end) if artifact.size else iter(())
        response = StreamingHttpResponse(body, status=206 if isinstance(wanted, tuple) else 200)
        response["Content-Type"] = artifact.mime_type
        response["Content-Length"] = str(max(0, end - start + 1))
        response["Accept-Ranges"] = "bytes"
        response["ETag"] = f'"{artifact.sha256}"'
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Disposition"] = _attachment_disposition(artifact.name or str(artifact.artifact_id))
        if isinstance(wanted, tuple):
            response["Content-Range"] = f"bytes {start}-{end}/{artifact.size}"
        return response


def _attachment_disposition(name: str) -> str:
    ascii_name = name.encode("ascii", "replace").decode().replace('"', "'").replace("\\", "_")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"
