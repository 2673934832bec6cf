"""`POST /api/v1/artifacts`, `GET /api/v1/artifacts/{id}` and `GET /api/v1/artifacts/{id}/content` with
HTTP Range, scoped to the caller's workspace."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from artifacts.models import Artifact
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def _upload(client, data: bytes, **fields):
    body = {"file": SimpleUploadedFile("pic.bin", data, content_type="text/html"), **fields}
    return client.post("/api/v1/artifacts", body, format="multipart")


def _content(response) -> bytes:
    return b"".join(response.streaming_content)


def test_upload_records_sniffed_type_hash_size_and_expiry(api_client):
    response = _upload(api_client, PNG, name="photo", expires_in="60")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["mime_type"] == "image/png"  # the content, not the declared text/html
    assert body["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert body["size"] == len(PNG)
    assert body["source"] == "upload"
    assert body["name"] == "photo"
    assert body["expires_at"] is not None
    artifact = Artifact.objects.get(artifact_id=body["artifact_id"])
    assert artifact.storage_key.startswith(f"ws-{artifact.workspace_id}/")


def test_upload_without_a_file_is_an_invalid_argument(api_client):
    response = api_client.post("/api/v1/artifacts", {"name": "x"}, format="multipart")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_argument"


def test_upload_over_the_limit_is_refused(api_client, settings):
    settings.LANGBOT_ARTIFACT_UPLOAD_MAX_BYTES = 10
    response = _upload(api_client, b"x" * 11)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_metadata_and_full_content(api_client):
    artifact_id = _upload(api_client, PNG).json()["artifact_id"]
    meta = api_client.get(f"/api/v1/artifacts/{artifact_id}")
    assert meta.status_code == 200
    assert meta.json()["size"] == len(PNG)
    content = api_client.get(f"/api/v1/artifacts/{artifact_id}/content")
    assert content.status_code == 200
    assert content["Content-Type"] == "image/png"
    assert content["Accept-Ranges"] == "bytes"
    assert content["Content-Length"] == str(len(PNG))
    assert _content(content) == PNG


@pytest.mark.parametrize(
    ("header", "expected"),
    [("bytes=0-9", (0, 9)), ("bytes=100-", (100, len(PNG) - 1)), ("bytes=-16", (len(PNG) - 16, len(PNG) - 1))],
)
def test_range_requests_answer_206_with_the_slice(api_client, header, expected):
    artifact_id = _upload(api_client, PNG).json()["artifact_id"]
    response = api_client.get(f"/api/v1/artifacts/{artifact_id}/content", HTTP_RANGE=header)
    start, end = expected
    assert response.status_code == 206
    assert response["Content-Range"] == f"bytes {start}-{end}/{len(PNG)}"
    assert _content(response) == PNG[start : end + 1]


def test_unsatisfiable_range_answers_416(api_client):
    artifact_id = _upload(api_client, PNG).json()["artifact_id"]
    response = api_client.get(f"/api/v1/artifacts/{artifact_id}/content", HTTP_RANGE=f"bytes={len(PNG)}-")
    assert response.status_code == 416
    assert response["Content-Range"] == f"bytes */{len(PNG)}"


def test_another_workspaces_artifact_is_not_found(api_client, api_client_for):
    artifact_id = _upload(api_client, PNG).json()["artifact_id"]
    stranger = api_client_for(WorkspaceFactory.create())
    assert stranger.get(f"/api/v1/artifacts/{artifact_id}").status_code == 404
    assert stranger.get(f"/api/v1/artifacts/{artifact_id}/content").status_code == 404


def test_expired_artifact_is_not_found(api_client):
    artifact_id = _upload(api_client, PNG).json()["artifact_id"]
    Artifact.objects.filter(artifact_id=artifact_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_client.get(f"/api/v1/artifacts/{artifact_id}").status_code == 404


def test_client_chosen_names_never_become_storage_paths(api_client):
    response = _upload(api_client, b"data", name="../../etc/passwd")
    artifact = Artifact.objects.get(artifact_id=response.json()["artifact_id"])
    assert ".." not in artifact.storage_key
    assert artifact.name == "../../etc/passwd"
