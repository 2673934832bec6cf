"""Attachments given inline (base64, data URL), by URL or as platform refs become artifact refs of the
event; uploads are bound to the conversation that first uses them; bad ones are refused by field."""

from __future__ import annotations

import base64

import pytest

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes, artifact_read_bytes
from tests.gateway.support import field_errors_of, message, post_event
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def attachments_of(response) -> list[dict]:
    assert response.status_code == 202, response.content
    return EventLog.objects.get(event_id=response.json()["event_id"]).input["attachments"]


def test_base64_and_data_url_attachments_are_stored_as_artifacts_of_the_conversation(api_client):
    encoded = base64.b64encode(PNG).decode()
    body = message(
        "look",
        conversation_id="c-1",
        input={
            "text": "look",
            "attachments": [
                {"base64": encoded, "name": "dot.png"},
                {"data_url": f"data:text/plain;base64,{base64.b64encode(b'hi there').decode()}"},
            ],
        },
    )

    refs = attachments_of(post_event(api_client, body))

    first, second = (Artifact.objects.get(artifact_id=ref["artifact_id"]) for ref in refs)
    assert artifact_read_bytes(artifact=first) == PNG
    assert first.mime_type == "image/png"
    assert artifact_read_bytes(artifact=second) == b"hi there"
    assert {first.conversation_id, second.conversation_id} == {"c-1"}
    user_item = TranscriptItem.objects.get(conversation_id="c-1", role="user")
    assert [ref["artifact_id"] for ref in user_item.artifacts] == [ref["artifact_id"] for ref in refs]


def test_a_platform_ref_is_kept_as_a_ref(api_client):
    ref = {"platform": "telegram", "file_id": "AgAC-123"}

    refs = attachments_of(post_event(api_client, message(input={"text": "x", "attachments": [{"platform_ref": ref}]})))

    assert refs[0]["platform_ref"] == ref
    assert not Artifact.objects.exists()


def test_a_url_on_a_private_address_is_refused_naming_the_attachment(api_client):
    body = message(input={"text": "x", "attachments": [{"url": "http://127.0.0.1:9/secret"}]})

    fields = field_errors_of(post_event(api_client, body))

    assert "input.attachments.0" in fields
    assert not EventLog.objects.exists()


def test_an_attachment_must_say_exactly_one_source(api_client):
    body = message(input={"text": "x", "attachments": [{"base64": "aGk=", "url": "https://example.org/a"}]})

    fields = field_errors_of(post_event(api_client, body))

    assert any(key.startswith("input.attachments.0") for key in fields)


def test_an_upload_without_conversation_is_bound_to_the_conversation_that_uses_it(api_client, workspace):
    upload = artifact_create_from_bytes(
        workspace=workspace, data=PNG, name="dot.png", mime_type="image/png", conversation_id="", source="input"
    )

    post_event(
        api_client, message(conversation_id="c-9", input={"attachments": [{"artifact_id": str(upload.artifact_id)}]})
    )

    upload.refresh_from_db()
    assert upload.conversation_id == "c-9"


def test_a_redelivered_event_with_inline_attachments_stores_nothing_twice(api_client):
    body = message(
        event_id="evt-inline", input={"text": "x", "attachments": [{"base64": base64.b64encode(PNG).decode()}]}
    )

    first = post_event(api_client, body)
    second = post_event(api_client, body)

    assert (first.status_code, second.status_code) == (202, 200)
    assert second.json()["duplicate"] is True
    assert Artifact.objects.count() == 1
