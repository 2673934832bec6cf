"""Admin for runs, events, transcripts, state and artifacts: read-only pages, filters, links between
them, and the "Cancel selected runs" action."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.services import workspace_member_add
from runners.models import Run, RunEvent
from tests.factories import UserFactory, WorkspaceFactory
from tests.gateway.support import binding_for, message, post_event
from transcripts.models import EventLog, StateEntry, TranscriptItem

pytestmark = pytest.mark.django_db




@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def run(api_client, workspace) -> Run:
    binding_for(workspace, binding_id="support", concurrency_policy="parallel")
    response = post_event(api_client, message("hello admin", event_id="evt-admin", conversation_id="c-admin"))
    return Run.objects.get(run_id=response.json()["runs"][0]["run_id"])


def test_the_run_page_shows_its_result_events_and_links(admin_client, run):
    RunEvent.objects.create(run=run, seq=1, type="message.delta", data={"chunk": "unique-chunk-text"})
    RunEvent.objects.create(run=run, seq=2, type="run.completed", data={})

    page = admin_client.get(reverse("admin:runners_run_change", args=[run.pk]))

    assert page.status_code == 200
    html = page.content.decode()
    assert "unique-chunk-text" in html
    assert "run.completed" in html
    assert reverse("admin:transcripts_eventlog_change", args=[run.event_id]) in html
    assert reverse("admin:transcripts_transcriptitem_changelist") in html
    assert 'name="_save"' not in html  # read-only


def test_the_run_page_shows_the_model_usage_the_host_counted_per_model(admin_client, run):
    tally = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16, "calls": 2}
    host = {"models": {"gpt-usage-model": tally}, "prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    Run.objects.filter(pk=run.pk).update(usage={"reported_by": "runner", "host": host})

    html = admin_client.get(reverse("admin:runners_run_change", args=[run.pk])).content.decode()

    assert "usage and cost (counted by the host)" in html
    assert "<td>gpt-usage-model</td><td>2</td><td>11</td><td>5</td><td>16</td>" in html
    assert "reported_by" in html  # the runner's own figures stay on the page as they were


def test_the_run_page_says_when_the_run_made_no_model_calls(admin_client, run):
    html = admin_client.get(reverse("admin:runners_run_change", args=[run.pk])).content.decode()

    assert "no model calls" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"status__exact": "queued"}, 2),
        ({"status__exact": "failed"}, 0),
        ({"runner_id": "plugin:tester/runner/default"}, 2),
        ({"runner_id": "plugin:someone/else/runner"}, 0),
        ({"conversation_id": "c-admin"}, 1),
        ({"q": "c-adm"}, 1),
    ],
)
def test_the_runs_list_filters_by_status_runner_and_conversation(admin_client, api_client, run, query, expected):
    post_event(api_client, message("other", conversation_id="c-other"))

    response = admin_client.get(reverse("admin:runners_run_changelist"), query)

    assert response.status_code == 200
    assert response.context["cl"].result_count == expected


def test_the_runs_list_filters_by_binding_and_finds_a_run_id(admin_client, api_client, workspace, run):
    binding_for(workspace, binding_id="audit", delivery_policy={"enable_reply": False})
    post_event(api_client, message("other", conversation_id="c-other"))
    url = reverse("admin:runners_run_changelist")

    by_binding = admin_client.get(url, {"binding__id__exact": run.binding_id})
    by_id = admin_client.get(url, {"q": str(run.run_id)})

    assert by_binding.context["cl"].result_count == 2
    assert [r.pk for r in by_id.context["cl"].result_list] == [run.pk]


def test_cancel_selected_runs_cancels_the_active_ones(admin_client, api_client, run):
    finished = Run.objects.get(run_id=post_event(api_client, message("x")).json()["runs"][0]["run_id"])
    Run.objects.filter(pk=finished.pk).update(status="completed", finished_at=timezone.now())

    response = admin_client.post(
        reverse("admin:runners_run_changelist"),
        {"action": "cancel_runs", "_selected_action": [run.pk, finished.pk]},
        follow=True,
    )

    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert "admin" in run.status_reason
    assert Run.objects.get(pk=finished.pk).status == "completed"
    shown = [str(m) for m in response.context["messages"]]
    assert any("1 cancelled" in m and "1 already finished" in m for m in shown), shown


def test_runs_cannot_be_added_or_deleted_in_admin(admin_client, run):
    assert admin_client.get(reverse("admin:runners_run_add")).status_code == 403
    assert admin_client.post(reverse("admin:runners_run_delete", args=[run.pk])).status_code == 403
    assert Run.objects.filter(pk=run.pk).exists()


def test_the_event_log_shows_a_routing_error(admin_client, api_client, workspace):
    binding_for(workspace, binding_id="alpha")
    binding_for(workspace, binding_id="beta")
    post_event(api_client, message(event_id="evt-conflict"))
    event = EventLog.objects.get(event_id="evt-conflict")

    listing = admin_client.get(reverse("admin:transcripts_eventlog_changelist"), {"status__exact": "conflict"})
    page = admin_client.get(reverse("admin:transcripts_eventlog_change", args=[event.pk]))

    assert listing.context["cl"].result_count == 1
    assert "binding.conflict" in page.content.decode()
    assert "beta" in page.content.decode()


def test_the_transcript_of_a_conversation_reads_in_order(admin_client, api_client, workspace, run):
    post_event(api_client, message("second message", conversation_id="c-admin"))
    post_event(api_client, message("not this conversation", conversation_id="c-else"))

    response = admin_client.get(
        reverse("admin:transcripts_transcriptitem_changelist"),
        {"conversation_id": "c-admin", "workspace__id__exact": workspace.pk},
    )

    assert response.status_code == 200
    items = list(response.context["cl"].result_list)
    assert [i.content for i in items] == ["hello admin", "second message"]


def test_staff_see_only_their_workspaces_facts(run):
    outsider = UserFactory.create(username="outsider", is_staff=True)
    outsider.user_permissions.add(*Permission.objects.filter(codename__in=["view_run", "view_eventlog"]))
    workspace_member_add(workspace=WorkspaceFactory.create(), user=outsider)
    client = Client()
    client.force_login(outsider)

    runs = client.get(reverse("admin:runners_run_changelist"))
    events = client.get(reverse("admin:transcripts_eventlog_changelist"))
    foreign_run = client.get(reverse("admin:runners_run_change", args=[run.pk]))

    assert runs.status_code == events.status_code == 200
    assert runs.context["cl"].result_count == 0
    assert events.context["cl"].result_count == 0
    assert foreign_run.status_code == 302  # admin redirects a missing object to the index


def test_state_and_artifact_pages_are_read_only(admin_client, workspace):
    entry = StateEntry.objects.create(
        workspace=workspace, scope="conversation", scope_key="conversation:r:b:c", key="k", value={"n": 1}
    )
    artifact = artifact_create_from_bytes(
        workspace=workspace, data=b"abc", name="a.txt", mime_type="text/plain", conversation_id="c",
        source=Artifact.Source.INPUT,
    )

    state_page = admin_client.get(reverse("admin:transcripts_stateentry_change", args=[entry.pk]))
    artifact_page = admin_client.get(reverse("admin:artifacts_artifact_change", args=[artifact.pk]))

    assert state_page.status_code == artifact_page.status_code == 200
    assert 'name="_save"' not in state_page.content.decode()
    assert artifact.sha256 in artifact_page.content.decode()
    assert admin_client.get(reverse("admin:artifacts_artifact_add")).status_code == 403
    assert admin_client.get(reverse("admin:transcripts_transcriptitem_add")).status_code == 403
    assert TranscriptItem.objects.count() == 0
