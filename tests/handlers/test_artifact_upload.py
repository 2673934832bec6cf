"""`artifact_upload_open` / `_chunk` / `_finish` / `_abort` through the real proxy handlers on a real database:
what a runner that uploads sees, what is stored, and what is refused (docs/protocol.md, "Artifact uploads")."""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from artifacts.models import Artifact, WorkspaceArtifactSettings
from hostapi import artifacts as artifact_handlers
from runners.models import ProxyCallAudit
from tests.factories import WorkspaceFactory
from tests.handlers.conftest import HostRun

pytestmark = pytest.mark.django_db(transaction=True)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(256)) * 40


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def upload(run: HostRun, data: bytes, *, chunk: int = 4096, name: str = "picture.png", **open_fields: Any) -> Any:
    opened = run.call("artifact_upload_open", name=name, **open_fields)
    for start in range(0, len(data), chunk):
        piece = b64(data[start : start + chunk])
        run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=start, data_base64=piece)
    return run.call(
        "artifact_upload_finish", upload_id=opened["upload_id"], size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )


def blobs(artifact_dir: Path) -> list[str]:
    return [p for p in glob.glob(str(artifact_dir / "**" / "*"), recursive=True) if os.path.isfile(p)]


@pytest.fixture(autouse=True)
def own_temp_dir(tmp_path, monkeypatch):
    """Each test's uploads in a temporary directory of its own: parallel test workers upload too, and a shared
    /tmp would show their files beside this test's."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))


def upload_temp_files() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "langbot-upload-*")))


def test_an_uploaded_artifact_is_stored_sniffed_and_readable_by_its_run(host_run, artifact_dir):
    run = host_run()
    before = upload_temp_files()

    meta = upload(run, PNG, mime_type="text/plain")

    assert meta["mime_type"] == "image/png"  # sniffed: the declared type is only a hint
    assert meta["size"] == len(PNG)
    assert meta["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert meta["source"] == "runner"
    assert meta["run_id"] == str(run.run.run_id)
    assert meta["conversation_id"] == run.conversation_id
    stored = Artifact.objects.get(artifact_id=meta["artifact_id"])
    assert stored.workspace_id == run.workspace.pk
    read = run.call("artifact_read", artifact_id=meta["artifact_id"], offset=0, length=len(PNG))
    assert base64.b64decode(read["data_base64"]) == PNG
    assert len(blobs(artifact_dir)) == 1
    assert upload_temp_files() <= before  # nothing left behind on the worker's disk
    audited = list(ProxyCallAudit.objects.filter(run_id=run.run.run_id).values_list("action", "outcome"))
    assert ("artifact_upload_open", "ok") in audited
    assert audited.count(("artifact_upload_chunk", "ok")) == -(-len(PNG) // 4096)
    assert ("artifact_upload_finish", "ok") in audited
    chunk_resource = ProxyCallAudit.objects.filter(action="artifact_upload_chunk").values_list("resource", flat=True)
    assert chunk_resource[0].startswith("upload_id=")


def test_a_checksum_that_does_not_match_stores_nothing(host_run, artifact_dir):
    run = host_run()
    opened = run.call("artifact_upload_open", name="x.bin")
    run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(b"abc"))

    refused = run.refused("artifact_upload_finish", upload_id=opened["upload_id"], size=3, sha256="0" * 64)

    assert refused.code == "invalid_argument"
    assert refused.error.details["field"] == "sha256"
    assert not Artifact.objects.exists()
    assert blobs(artifact_dir) == []
    # The upload is over: it cannot be finished again with the right sum.
    again = run.refused(
        "artifact_upload_finish", upload_id=opened["upload_id"], size=3, sha256=hashlib.sha256(b"abc").hexdigest()
    )
    assert again.code == "not_found"


def test_a_wrong_size_at_finish_is_refused(host_run):
    run = host_run()
    opened = run.call("artifact_upload_open", name="x.bin")
    run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(b"abc"))
    refused = run.refused(
        "artifact_upload_finish", upload_id=opened["upload_id"], size=4, sha256=hashlib.sha256(b"abc").hexdigest()
    )
    assert (refused.code, refused.error.details["field"]) == ("invalid_argument", "size")


def test_the_workspace_limit_caps_an_upload(host_run, artifact_dir):
    run = host_run()
    WorkspaceArtifactSettings.objects.create(workspace=run.workspace, runner_upload_max_bytes=5000)

    declared = run.refused("artifact_upload_open", name="big.bin", size=5001)
    assert declared.code == "payload_too_large"

    opened = run.call("artifact_upload_open", name="big.bin")
    assert opened["max_bytes"] == 5000
    run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(bytes(4000)))
    over = run.refused(
        "artifact_upload_chunk", upload_id=opened["upload_id"], offset=4000, data_base64=b64(bytes(1001))
    )
    assert over.code == "payload_too_large"
    # Past the cap the upload is dropped: nothing more can be sent to it.
    gone = run.refused("artifact_upload_chunk", upload_id=opened["upload_id"], offset=4000, data_base64=b64(b"x"))
    assert gone.code == "not_found"
    assert blobs(artifact_dir) == []


def test_the_default_limit_is_100_mib_and_zero_turns_uploads_off(host_run):
    run = host_run()
    assert run.call("artifact_upload_open", name="a.bin", size=100 * 1024 * 1024)["max_bytes"] == 100 * 1024 * 1024
    assert run.refused("artifact_upload_open", name="a.bin", size=100 * 1024 * 1024 + 1).code == "payload_too_large"

    WorkspaceArtifactSettings.objects.create(workspace=run.workspace, runner_upload_max_bytes=0)
    assert run.refused("artifact_upload_open", name="a.bin").code == "unauthorized"


def test_the_run_context_says_whether_uploads_are_open(host_run):
    # given one workspace on the default limit and one whose uploads are turned off
    opened = host_run()
    closed_workspace = WorkspaceFactory.create()
    WorkspaceArtifactSettings.objects.create(workspace=closed_workspace, runner_upload_max_bytes=0)

    # when a run starts in each
    closed = host_run(workspace=closed_workspace)

    # then only the first run's context opens uploads, and the second's open is refused
    assert opened.built.context.context.available_apis.artifact_upload is True
    assert closed.built.context.context.available_apis.artifact_upload is False
    refusal = closed.refused("artifact_upload_open", name="a.bin")
    assert (refusal.code, refusal.error.details.get("api")) == ("unauthorized", "artifacts.upload")


def test_chunks_must_arrive_in_order(host_run):
    run = host_run()
    opened = run.call("artifact_upload_open", name="x.bin")
    run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(b"abc"))

    skipped = run.refused("artifact_upload_chunk", upload_id=opened["upload_id"], offset=10, data_base64=b64(b"d"))

    assert skipped.code == "invalid_argument"
    assert skipped.error.details["expected_offset"] == 3
    progress = run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=3, data_base64=b64(b"d"))
    assert progress["received"] == 4


def test_another_run_cannot_touch_an_upload(host_run):
    mine = host_run()
    other_conversation = host_run(workspace=mine.workspace, conversation_id="conv-b")
    other_workspace = host_run()
    opened = mine.call("artifact_upload_open", name="x.bin")

    for other in (other_conversation, other_workspace):
        chunk = other.refused("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(b"a"))
        assert chunk.code == "not_found"
        assert other.refused("artifact_upload_abort", upload_id=opened["upload_id"]).code == "not_found"
    # Still the owner's to finish.
    mine.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(b"a"))
    meta = mine.call(
        "artifact_upload_finish", upload_id=opened["upload_id"], size=1, sha256=hashlib.sha256(b"a").hexdigest()
    )
    assert meta["size"] == 1


def test_a_run_keeps_at_most_four_uploads_open(host_run):
    run = host_run()
    ids = [run.call("artifact_upload_open", name=f"{i}.bin")["upload_id"] for i in range(4)]
    refused = run.refused("artifact_upload_open", name="5.bin")
    assert refused.code == "rate_limited"
    assert refused.error.retryable
    run.call("artifact_upload_abort", upload_id=ids[0])
    assert run.call("artifact_upload_open", name="5.bin")["upload_id"]


def test_an_abandoned_upload_leaves_nothing_behind(host_run, artifact_dir, monkeypatch):
    run = host_run()
    before = upload_temp_files()
    opened = run.call("artifact_upload_open", name="half.bin")
    run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(bytes(1000)))
    assert len(upload_temp_files() - before) == 1

    # The runner goes away: its run ends, so no call of it is served any more...
    run.active = False
    ended = run.refused("artifact_upload_chunk", upload_id=opened["upload_id"], offset=1000, data_base64=b64(b"x"))
    assert ended.code == "unauthorized"
    # ...and the worker's sweep drops what it left once it is stale (here: at once).
    monkeypatch.setattr(artifact_handlers, "UPLOAD_IDLE_SECONDS", 0.0)
    assert artifact_handlers.uploads_sweep() >= 1

    assert upload_temp_files() <= before
    assert blobs(artifact_dir) == []
    assert not Artifact.objects.exists()


def test_an_aborted_upload_is_gone(host_run, artifact_dir):
    run = host_run()
    before = upload_temp_files()
    opened = run.call("artifact_upload_open", name="x.bin")
    run.call("artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(b"abc"))

    aborted = run.call("artifact_upload_abort", upload_id=opened["upload_id"])

    assert aborted == {"upload_id": opened["upload_id"], "received": 3, "aborted": True}
    assert upload_temp_files() <= before
    assert blobs(artifact_dir) == []
    after = run.refused("artifact_upload_chunk", upload_id=opened["upload_id"], offset=3, data_base64=b64(b"d"))
    assert after.code == "not_found"


def test_an_oversized_chunk_is_refused_before_it_is_read(host_run):
    run = host_run()
    opened = run.call("artifact_upload_open", name="x.bin")
    refused = run.refused(
        "artifact_upload_chunk", upload_id=opened["upload_id"], offset=0, data_base64=b64(bytes(8 * 1024 * 1024 + 1))
    )
    assert refused.code == "payload_too_large"
