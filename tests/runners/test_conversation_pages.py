"""The admin's conversation pages: the list of conversations (last message, time, bot, platform), and one
conversation as chat bubbles with the run beside each reply — status, duration, tokens, cost — its tool calls,
files and citations; scoped to the workspaces the user belongs to."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from bindings.services import workspace_member_add
from runners.models import Run, RunEvent
from tests.factories import UserFactory, WorkspaceFactory
from tests.gateway.support import binding_for, message, post_event
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/conversations/"


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def conversation_url(workspace_id: int, conversation_id: str) -> str:
    return reverse("admin-conversation", kwargs={"workspace_id": workspace_id, "conversation_id": conversation_id})


@pytest.fixture
def answered(api_client, workspace) -> Run:
    """A question in conversation c-chat answered by a run that called a tool, made a file and cited a source."""
    binding_for(workspace, binding_id="support", concurrency_policy="parallel")
    bot = Bot.objects.create(workspace=workspace, bot_id="tg-help", name="Help bot", platform="telegram")
    response = post_event(api_client, message("what is our refund policy?", conversation_id="c-chat"))
    run = Run.objects.get(run_id=response.json()["runs"][0]["run_id"])
    EventLog.objects.filter(pk=run.event_id).update(bot=bot)
    chart = artifact_create_from_bytes(
        workspace=workspace, data=b"\x89PNG\r\n\x1a\n", name="chart.png", mime_type="image/png",
        conversation_id="c-chat", source=Artifact.Source.RUNNER,
    )  # fmt: skip
    events = [
        ("tool.call.started", {"tool_call_id": "t1", "tool_name": "policy_lookup", "parameters": {"topic": "refund"}}),
        ("tool.call.completed", {"tool_call_id": "t1", "tool_name": "policy_lookup", "result": {"days": 30}}),
        ("artifact.created", chart.as_ref()),
        ("message.completed", {"message": {"role": "assistant", "content": "Refunds within 30 days."}}),
        ("run.completed", {"metadata": {"citations": [
            {"kb_id": "policies", "document_name": "refunds.md", "score": 0.91,
             "excerpt": "Refunds are accepted for 30 days."}
        ]}}),
    ]  # fmt: skip
    for seq, (kind, data) in enumerate(events, start=1):
        RunEvent.objects.create(run=run, seq=seq, type=kind, data=data)
    host = {"total_tokens": 321, "cost": "0.0042", "currency": "USD", "models": {}}
    Run.objects.filter(pk=run.pk).update(
        status="completed", started_at=timezone.now(), finished_at=timezone.now(), usage={"host": host}
    )
    TranscriptItem.objects.create(
        workspace=workspace, conversation_id="c-chat", role="assistant", content="Refunds within 30 days.",
        run_id=run.run_id, runner_id=run.runner_id,
    )  # fmt: skip
    return run


def test_the_list_shows_each_conversation_with_its_last_message_bot_and_platform(admin_client, api_client, answered):
    post_event(api_client, message("a newer chat", conversation_id="c-new"))

    response = admin_client.get(LIST_URL)

    assert response.status_code == 200
    html = response.content.decode()
    assert conversation_url(answered.workspace_id, "c-chat") in html
    assert "Refunds within 30 days." in html
    assert "Help bot" in html
    assert "telegram" in html
    assert html.index("c-new") < html.index("c-chat")  # the most recently active first


def test_the_list_filters_by_conversation_id(admin_client, api_client, answered):
    post_event(api_client, message("other", conversation_id="c-other"))

    html = admin_client.get(LIST_URL, {"q": "chat"}).content.decode()

    assert "c-chat" in html
    assert "c-other" not in html


def test_a_conversation_reads_as_bubbles_with_the_run_beside_the_reply(admin_client, answered):
    response = admin_client.get(conversation_url(answered.workspace_id, "c-chat"))

    assert response.status_code == 200
    html = response.content.decode()
    assert html.index("what is our refund policy?") < html.index("Refunds within 30 days.")
    assert 'class="turn user"' in html
    assert 'class="turn assistant"' in html
    assert f'data-run-id="{answered.run_id}"' in html
    assert reverse("admin:runners_run_change", args=[answered.pk]) in html
    assert "321" in html  # tokens
    assert "0.0042 USD" in html  # cost
    assert "policy_lookup" in html
    assert "&quot;topic&quot;: &quot;refund&quot;" in html
    assert "refunds.md" in html
    assert "Refunds are accepted for 30 days." in html
    assert '<img src="/api/v1/artifacts/' in html  # the image as a thumbnail
    assert 'class="conversation-actions"' in html  # where takeover buttons go


def test_a_run_that_wrote_no_reply_is_shown_after_the_message_that_started_it(admin_client, api_client, answered):
    response = post_event(api_client, message("are you there?", conversation_id="c-chat"))
    failed = Run.objects.get(run_id=response.json()["runs"][0]["run_id"])
    Run.objects.filter(pk=failed.pk).update(
        status="failed", error={"code": "runner.error", "message": "boom"}, finished_at=timezone.now()
    )

    html = admin_client.get(conversation_url(answered.workspace_id, "c-chat")).content.decode()

    assert html.index("are you there?") < html.index(f'data-run-id="{failed.run_id}"')
    assert "runner.error: boom" in html


def test_another_workspaces_conversation_is_not_found_and_not_listed(answered):
    outsider = UserFactory.create(username="outsider", is_staff=True)
    outsider.user_permissions.add(Permission.objects.get(codename="view_transcriptitem"))
    workspace_member_add(workspace=WorkspaceFactory.create(), user=outsider)
    client = Client()
    client.force_login(outsider)

    listing = client.get(LIST_URL)
    page = client.get(conversation_url(answered.workspace_id, "c-chat"))

    assert listing.status_code == 200
    assert "c-chat" not in listing.content.decode()
    assert page.status_code == 404


def test_staff_without_the_transcript_permission_are_refused(answered):
    member = UserFactory.create(username="member", is_staff=True)
    workspace_member_add(workspace=answered.workspace, user=member)
    client = Client()
    client.force_login(member)

    assert client.get(LIST_URL).status_code == 403
    assert client.get(conversation_url(answered.workspace_id, "c-chat")).status_code == 403


def test_an_unknown_conversation_is_not_found(admin_client, answered):
    assert admin_client.get(conversation_url(answered.workspace_id, "c-nothing")).status_code == 404
