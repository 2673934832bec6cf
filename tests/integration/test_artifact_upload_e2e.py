"""A runner's uploaded artifact reaches the user, through the real plugin runtime and a real Celery worker: the
qa-runner's `upload` behaviour makes a 50 MiB PNG a MiB at a time and sends it with `api.artifacts.upload`;
the run's events (what the web chat and the API show) announce it by id, with the type and size the host
stored, and its content streams back byte for byte. A run naming an artifact it may not read shows nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from artifacts.storage import artifact_storage
from tests.factories import WorkspaceFactory
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _remove_blobs() -> Iterator[None]:
    # The worker writes to the configured storage; the blobs are removed afterwards.
    yield
    storage = artifact_storage()
    for key in Artifact.objects.values_list("storage_key", flat=True):
        storage.delete(key)


def _artifact_events(client: Any, run: Any) -> list[dict[str, Any]]:
    events = client.get(f"/api/v1/runs/{run.run_id}/events", {"limit": 100}).json()["items"]
    return [event["data"] for event in events if event["type"] == "artifact.created"]


def test_a_50_mib_image_a_runner_uploads_reaches_the_chat_and_the_api(worker, qa_binding, api_client_for):
    binding = qa_binding()
    run = wait_terminal(post_message(binding, "qa:upload:50 draw me a picture", conversation_id="up-1"), timeout=240)
    assert run.status == "completed", run.error
    _, artifact_id, size, runner_sha256, mime_type = run.output.split(":")
    assert (int(size), mime_type) == (50 * MIB, "image/png")

    client = api_client_for(binding.workspace)
    # The run's events are what the web chat renders (an image link) and what the API lists.
    [announced] = _artifact_events(client, run)
    assert announced["artifact_id"] == artifact_id
    assert announced["mime_type"] == "image/png"
    assert announced["size"] == 50 * MIB
    assert announced["sha256"] == runner_sha256

    meta = client.get(f"/api/v1/artifacts/{artifact_id}").json()
    assert (meta["size"], meta["mime_type"], meta["source"]) == (50 * MIB, "image/png", "runner")
    content = client.get(f"/api/v1/artifacts/{artifact_id}/content")
    assert content.status_code == 200
    digest, received = hashlib.sha256(), 0
    for piece in content.streaming_content:  # read as it streams, never held whole
        digest.update(piece)
        received += len(piece)
    assert received == 50 * MIB
    assert digest.hexdigest() == runner_sha256


def test_a_run_naming_an_artifact_it_may_not_read_shows_nothing(worker, qa_binding, api_client_for):
    binding = qa_binding()
    theirs = artifact_create_from_bytes(
        workspace=WorkspaceFactory.create(), data=b"their secret", name="secret.txt", mime_type="text/plain",
        conversation_id="up-2", source="upload",
    )  # fmt: skip
    other_conversation = artifact_create_from_bytes(
        workspace=binding.workspace, data=b"another chat's file", name="other.txt", mime_type="text/plain",
        conversation_id="up-elsewhere", source="upload",
    )  # fmt: skip
    client = api_client_for(binding.workspace)

    for artifact in (theirs, other_conversation):
        run = wait_terminal(post_message(binding, f"qa:announce:{artifact.artifact_id}", conversation_id="up-2"))
        assert run.status == "completed", run.error
        [announced] = _artifact_events(client, run)
        assert "artifact_id" not in announced
        assert announced["error"]["code"] == "not_found"
