"""Attachments in the debug chat: the page uploads each file with its session and CSRF token, then names the
artifacts in the WebSocket `message`; the event and the user's transcript item carry the stored refs."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from runners.models import Run
from tests.factories import AgentBindingFactory, WorkspaceFactory
from tests.streaming.conftest import ORIGIN, next_json, open_socket, session_cookie
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)

# A 1×1 PNG: enough for the server to sniff `image/png`.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360f8cfc0f01f0005000201e221bc330000000049454e44ae426082"
)




def stored_png(workspace) -> Artifact:
    return artifact_create_from_bytes(
        workspace=workspace, data=PNG, name="dot.png", mime_type="", conversation_id="", source=Artifact.Source.UPLOAD
    )


def browser_session(user) -> Client:
    """A client like the chat page: signed in, CSRF enforced, holding the cookie the page sets."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/chat/").status_code == 200
    return client


def test_the_page_can_upload_with_its_session_and_csrf_token(member):
    user, workspace = member
    client = browser_session(user)
    token = client.cookies["csrftoken"].value

    def upload(headers: dict[str, str]):
        body = {"file": SimpleUploadedFile("dot.png", PNG, content_type="application/octet-stream")}
        return client.post(f"/api/v1/artifacts?workspace={workspace.slug}", body, headers=headers)

    without_token = upload({})
    answer = upload({"X-CSRFToken": token})

    assert without_token.status_code == 403
    assert answer.status_code == 201
    body = answer.json()
    assert (body["name"], body["mime_type"], body["size"]) == ("dot.png", "image/png", len(PNG))
    content = client.get(f"/api/v1/artifacts/{body['artifact_id']}/content?workspace={workspace.slug}")
    assert content.getvalue() == PNG


def test_an_upload_over_the_limit_answers_413_with_a_message_the_page_can_show(member, settings):
    settings.LANGBOT_ARTIFACT_UPLOAD_MAX_BYTES = 10
    user, workspace = member
    client = browser_session(user)

    answer = client.post(
        f"/api/v1/artifacts?workspace={workspace.slug}",
        {"file": SimpleUploadedFile("big.png", PNG)},
        headers={"X-CSRFToken": client.cookies["csrftoken"].value},
    )

    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"
    assert str(len(PNG)) in answer.json()["error"]["message"]


async def test_a_chat_message_carries_its_attachments_to_the_event_and_the_transcript(member):
    user, workspace = member
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    artifact = await database_sync_to_async(stored_png)(workspace)
    comm, connected, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(user))
    assert connected

    await comm.send_json_to(
        {"type": "message", "text": "look", "attachments": [{"artifact_id": str(artifact.artifact_id)}]}
    )
    await next_json(comm)  # subscribed
    status = await next_json(comm)

    assert status["type"] == "run.status"
    event = await database_sync_to_async(EventLog.objects.get)(event_id=status["event_id"])
    ref = {"artifact_id": str(artifact.artifact_id), "name": "dot.png", "mime_type": "image/png"}
    assert [{k: a[k] for k in ref} for a in event.input["attachments"]] == [ref]
    item = await database_sync_to_async(TranscriptItem.objects.get)(event=event, role=TranscriptItem.Role.USER)
    assert [{k: a[k] for k in ref} for a in item.artifacts] == [ref]
    await comm.disconnect()


async def test_an_attachment_the_workspace_does_not_have_is_refused_and_nothing_runs(member):
    user, workspace = member
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    stranger = await database_sync_to_async(WorkspaceFactory.create)()
    theirs = await database_sync_to_async(stored_png)(stranger)
    comm, connected, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(user))
    assert connected

    attachments = [{"artifact_id": str(theirs.artifact_id)}]
    await comm.send_json_to({"type": "message", "conversation_id": "c-att", "text": "x", "attachments": attachments})
    await next_json(comm)  # subscribed
    error = await next_json(comm)

    assert (error["type"], error["code"]) == ("error", "invalid_argument")
    assert "input.attachments.0.artifact_id" in error["details"]["fields"]
    assert not await database_sync_to_async(Run.objects.filter(conversation_id="c-att").exists)()
    await comm.disconnect()
