"""Which conversation an event belongs to, raw platform payloads kept as artifacts, attachments, and the
artifact storage chosen by URL."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import FileSystemStorage

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes, artifact_read_bytes
from artifacts.storage import storage_from_url
from tests.factories import BotFactory, WorkspaceFactory
from tests.gateway.support import field_errors_of, message, post_event
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db


def conversation_of(client, body) -> str:
    response = post_event(client, body)
    assert response.status_code == 202, response.content
    return response.json()["conversation_id"]


def test_a_given_conversation_id_is_used_as_is(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="tg")

    assert conversation_of(api_client, message(bot_id="tg", conversation_id="Sales/2026 #7")) == "Sales/2026 #7"


def test_messages_of_one_chat_on_one_bot_share_a_conversation(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="tg")

    first = conversation_of(api_client, message(bot_id="tg", data={"chat_id": -100123}))
    second = conversation_of(api_client, message(bot_id="tg", data={"chat_id": -100123}))
    other_chat = conversation_of(api_client, message(bot_id="tg", data={"chat_id": 5}))

    assert first == second == "bot:tg:-100123"
    assert other_chat == "bot:tg:5"


def test_without_a_chat_id_the_actor_is_the_chat(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="dm-bot")

    conversation = conversation_of(api_client, message(bot_id="dm-bot", actor={"actor_id": "u-42"}))

    assert conversation == "bot:dm-bot:u-42"


def test_without_bot_or_chat_an_event_is_its_own_conversation(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="tg")

    no_bot = post_event(api_client, message(event_id="e-1", actor={"actor_id": "u-1"})).json()
    no_chat = post_event(api_client, message(event_id="e-2", bot_id="tg")).json()

    assert no_bot["conversation_id"] == "evt:e-1"
    assert no_chat["conversation_id"] == "evt:e-2"


def test_a_very_long_chat_id_still_derives_one_bounded_conversation(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="tg")
    chat = "c" * 400

    first = conversation_of(api_client, message(bot_id="tg", data={"chat_id": chat}))
    second = conversation_of(api_client, message(bot_id="tg", data={"chat_id": chat}))

    assert first == second
    assert len(first) <= 255
    assert first.startswith("bot:tg:")


def test_a_large_raw_payload_is_stored_as_an_artifact(api_client, workspace, settings):
    settings.LANGBOT_RAW_INLINE_MAX_BYTES = 1024
    raw = {"update_id": 1, "message": {"text": "x" * 5000}}

    post_event(api_client, message(conversation_id="c-raw", data={"chat_id": 1, "raw": raw}))

    event = EventLog.objects.get()
    assert event.data == {"chat_id": 1}
    artifact = Artifact.objects.get()
    assert event.raw_ref == {
        "artifact_id": str(artifact.artifact_id),
        "size": artifact.size,
        "mime_type": "application/json",
    }
    assert (artifact.source, artifact.workspace, artifact.event, artifact.conversation_id) == (
        "raw_event", workspace, event, "c-raw"
    )
    stored = artifact_read_bytes(artifact=artifact)
    assert json.loads(stored) == raw
    assert artifact.sha256 == hashlib.sha256(stored).hexdigest()


def test_a_small_raw_payload_stays_inline(api_client, workspace, settings):
    settings.LANGBOT_RAW_INLINE_MAX_BYTES = 1024

    post_event(api_client, message(data={"raw": {"update_id": 1}}))

    event = EventLog.objects.get()
    assert event.data == {"raw": {"update_id": 1}}
    assert event.raw_ref is None
    assert not Artifact.objects.exists()


def test_a_duplicate_event_stores_its_raw_payload_once(api_client, workspace, settings):
    settings.LANGBOT_RAW_INLINE_MAX_BYTES = 10
    body = message(event_id="evt-raw", data={"raw": {"blob": "y" * 100}})

    post_event(api_client, body)
    post_event(api_client, body)

    assert Artifact.objects.count() == 1


def test_attachments_carry_the_stored_artifacts_metadata(api_client, workspace):
    artifact = artifact_create_from_bytes(
        workspace=workspace, data=b"%PDF-1.7", name="invoice.pdf", mime_type="application/pdf",
        conversation_id="c-1", source="input",
    )

    post_event(
        api_client,
        {"input": {"attachments": [{"artifact_id": str(artifact.artifact_id), "name": "renamed.exe", "size": 1}]}},
    )

    event = EventLog.objects.get()
    [ref] = event.input["attachments"]
    assert ref["artifact_id"] == str(artifact.artifact_id)
    assert (ref["name"], ref["mime_type"], ref["size"]) == ("invoice.pdf", "application/pdf", 8)
    assert event.input_summary == "[1 attachment]"
    assert event.transcript_items.get().artifacts == [ref]


def test_another_workspaces_artifact_cannot_be_attached(api_client, workspace):
    foreign = artifact_create_from_bytes(
        workspace=WorkspaceFactory.create(), data=b"secret", name="s.txt", mime_type="text/plain",
        conversation_id="", source="input",
    )

    response = post_event(api_client, {"input": {"attachments": [{"artifact_id": str(foreign.artifact_id)}]}})

    assert "input.attachments.0.artifact_id" in field_errors_of(response)
    assert not EventLog.objects.exists()


def test_artifact_storage_keys_are_generated_per_workspace(workspace, artifact_dir):
    first = artifact_create_from_bytes(
        workspace=workspace, data=b"a", name="../../etc/passwd", mime_type="text/plain", conversation_id="",
        source="input",
    )
    second = artifact_create_from_bytes(
        workspace=workspace, data=b"b", name="../../etc/passwd", mime_type="text/plain", conversation_id="",
        source="input",
    )

    assert first.storage_key != second.storage_key
    assert first.storage_key.startswith(f"ws-{workspace.pk}/")
    assert "passwd" not in first.storage_key
    assert (artifact_dir / first.storage_key).read_bytes() == b"a"


def test_file_url_selects_a_filesystem_storage(tmp_path):
    storage = storage_from_url(f"file://{tmp_path}/blobs")

    assert isinstance(storage, FileSystemStorage)
    assert storage.location == f"{tmp_path}/blobs"


def test_s3_url_selects_s3_storage_with_its_options():
    pytest.importorskip("boto3")

    storage: Any = storage_from_url("s3://my-bucket/langbot/artifacts?endpoint_url=http://minio:9000&region=eu-west-1")

    assert type(storage).__name__ == "S3Storage"
    assert storage.bucket_name == "my-bucket"
    assert storage.location == "langbot/artifacts"
    assert storage.endpoint_url == "http://minio:9000"
    assert storage.region_name == "eu-west-1"


@pytest.mark.parametrize("url", ["ftp://host/x", "file://relative/path", "s3:///no-bucket"])
def test_an_unusable_storage_url_is_a_configuration_error(url):
    with pytest.raises(ImproperlyConfigured):
        storage_from_url(url)
