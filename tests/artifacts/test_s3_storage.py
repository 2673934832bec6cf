"""Artifacts kept in S3 (`ARTIFACT_STORAGE_URL=s3://...`, django-storages' S3 backend), against moto's S3
server standing in for S3 over real HTTP: a runner's upload is stored there and read back by the run and the
API; an upload abandoned mid-way leaves no object in the bucket."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped]  # no stubs installed; the test only makes a bucket
import pytest
from moto.server import ThreadedMotoServer

from artifacts.models import Artifact
from hostapi import artifacts as artifact_handlers
from tests.handlers.conftest import host_run  # noqa: F401 - the fixture, shared with the handler tests

pytestmark = pytest.mark.django_db(transaction=True)

BUCKET = "langbot-artifacts"


@pytest.fixture
def s3(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's S3 on a local port, a bucket in it, and the artifact storage pointed at it."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    # moto keeps its buckets per process, across servers: each test starts from an empty one.
    for key in _keys(client) if BUCKET in [b["Name"] for b in client.list_buckets()["Buckets"]] else []:
        client.delete_object(Bucket=BUCKET, Key=key)
    client.create_bucket(Bucket=BUCKET)
    settings.ARTIFACT_STORAGE_URL = f"s3://{BUCKET}/artifacts?endpoint_url={endpoint}&region=us-east-1"
    yield client
    server.stop()


def _keys(client: Any) -> list[str]:
    return [item["Key"] for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_a_runner_upload_is_stored_in_s3_and_read_back(s3, host_run, api_client_for):  # noqa: F811
    run = host_run()
    data = b"%PDF-1.7\n" + bytes(range(256)) * 4000  # about 1 MiB, sent in three chunks
    opened = run.call("artifact_upload_open", name="report.pdf", size=len(data))
    for start in range(0, len(data), 400_000):
        piece = base64.b64encode(data[start : start + 400_000]).decode()
        run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=start, data_base64=piece)
    meta = run.call(
        "artifact_upload_finish", upload_id=opened["upload_id"], size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )

    stored = Artifact.objects.get(artifact_id=meta["artifact_id"])
    assert _keys(s3) == [f"artifacts/{stored.storage_key}"]
    assert s3.get_object(Bucket=BUCKET, Key=f"artifacts/{stored.storage_key}")["Body"].read() == data
    assert meta["mime_type"] == "application/pdf"
    read = run.call("artifact_read", artifact_id=meta["artifact_id"], offset=100, length=1000)
    assert base64.b64decode(read["data_base64"]) == data[100:1100]
    response = api_client_for(run.workspace).get(f"/api/v1/artifacts/{meta['artifact_id']}/content")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == data


def test_an_upload_abandoned_mid_way_leaves_nothing_in_the_bucket(s3, host_run, monkeypatch):  # noqa: F811
    run = host_run()
    opened = run.call("artifact_upload_open", name="half.bin")
    run.call(
        "artifact_upload_chunk",
        upload_id=opened["upload_id"],
        offset=0,
        data_base64=base64.b64encode(b"x" * 1000).decode(),
    )
    run.active = False
    monkeypatch.setattr(artifact_handlers, "UPLOAD_IDLE_SECONDS", 0.0)
    artifact_handlers.uploads_sweep()

    assert _keys(s3) == []
    assert not Artifact.objects.exists()
