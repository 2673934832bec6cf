"""Approvals finish (issue 22): a platform action waiting for an operator is bounded by its run and by
an expiry, is decided in admin or over REST, and the runner learns what became of it (`action.get`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from bindings.services import api_key_create
from runners.actions.platform_actions import platform_action_approve, platform_action_reject
from runners.models import PlatformActionRequest, Run
from runners.tasks import runs_sweep
from tests.factories import WorkspaceFactory
from transcripts.models import TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)

NEEDS_APPROVAL = {"platform_actions": ["message.send"]}


def _pending(run: Any, text: str, **payload: Any) -> PlatformActionRequest:
    refused = run.refused("platform_request_action", action="message.send", payload={"text": text, **payload})
    assert refused.error.details["status"] == "pending_approval"
    return PlatformActionRequest.objects.get(pk=refused.error.details["request_id"])


def _outcome(run: Any, request_id: Any) -> dict[str, Any]:
    answer = run.call("platform_request_action", action="action.get", target={"request_id": request_id})
    assert answer["accepted"] is True
    return answer["result"]


def _end(run: Any) -> None:
    Run.objects.filter(pk=run.run.pk).update(status=Run.Status.COMPLETED, finished_at=timezone.now())


def _client(workspace: Any) -> APIClient:
    _, key = api_key_create(workspace=workspace)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_the_runner_sees_its_request_pending_then_executed_with_the_platforms_answer(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    request = _pending(run, "approved later")
    assert _outcome(run, request.pk)["status"] == "pending_approval"

    outcome = platform_action_approve(request=request, operator="alice")

    assert outcome.decided
    seen = _outcome(run, request.pk)
    assert seen["status"] == "executed"
    item = TranscriptItem.objects.get(content="approved later")
    assert seen["result"]["message_id"] == str(item.pk)
    assert seen["executed_at"] is not None


def test_the_runner_sees_a_rejection_and_nothing_is_delivered(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    request = _pending(run, "never")

    assert platform_action_reject(request=request, operator="bob").decided

    assert _outcome(run, str(request.pk))["status"] == "rejected"
    assert not TranscriptItem.objects.filter(content="never").exists()
    # a later approval changes nothing
    assert not platform_action_approve(request=request, operator="alice").decided
    assert not TranscriptItem.objects.filter(content="never").exists()


def test_a_pending_request_waits_at_most_the_approval_time_and_never_past_the_runs_deadline(host_run, settings):
    settings.LANGBOT_ACTION_APPROVAL_SECONDS = 30
    run = host_run(resource_policy=NEEDS_APPROVAL, deadline_seconds=3600)
    short = host_run(resource_policy=NEEDS_APPROVAL, deadline_seconds=5)

    within_run = _pending(run, "a")
    bounded_by_deadline = _pending(short, "b")
    outliving = _pending(short, "c", may_outlive_run=True)

    expires = within_run.expires_at
    assert expires is not None
    assert within_run.created_at + timedelta(seconds=29) < expires <= within_run.created_at + timedelta(seconds=31)
    assert bounded_by_deadline.expires_at == short.run.deadline_at
    assert outliving.expires_at > short.run.deadline_at
    # the flag is the host's: it is stored on the request, not delivered
    assert outliving.may_outlive_run
    assert outliving.payload == {"text": "c"}


def test_a_request_nobody_decided_in_time_expires_and_the_runner_sees_it(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    request = _pending(run, "too late")
    PlatformActionRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    seen = _outcome(run, request.pk)

    assert (seen["status"], seen["error"]["code"]) == ("expired", "expired")
    outcome = platform_action_approve(request=request, operator="alice")
    assert not outcome.decided
    assert outcome.request.status == "expired"
    assert not TranscriptItem.objects.filter(content="too late").exists()


def test_approving_after_the_run_ended_is_refused_and_recorded(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    request = _pending(run, "after the end")
    _end(run)

    outcome = platform_action_approve(request=request, operator="alice")

    assert not outcome.decided
    request.refresh_from_db()
    assert (request.status, (request.error or {}).get("code"), request.decided_by) == ("expired", "run_ended", "alice")
    assert request.executed_at is None
    assert not TranscriptItem.objects.filter(content="after the end").exists()


def test_a_request_that_may_outlive_its_run_executes_when_approved_after_it(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    request = _pending(run, "tomorrow at nine", may_outlive_run=True)
    _end(run)
    runs_sweep()  # the sweep leaves it pending

    outcome = platform_action_approve(request=request, operator="alice")

    assert outcome.decided
    assert outcome.request.status == "executed"
    assert TranscriptItem.objects.filter(content="tomorrow at nine", conversation_id=run.conversation_id).count() == 1


def test_the_runs_sweep_expires_the_requests_of_ended_runs_and_the_overdue_ones(host_run):
    ended = host_run(resource_policy=NEEDS_APPROVAL)
    ongoing = host_run(resource_policy=NEEDS_APPROVAL)
    of_ended, overdue, waiting = _pending(ended, "x"), _pending(ongoing, "y"), _pending(ongoing, "z")
    _end(ended)
    PlatformActionRequest.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    runs_sweep()

    statuses = dict(PlatformActionRequest.objects.values_list("pk", "status"))
    assert statuses == {of_ended.pk: "expired", overdue.pk: "expired", waiting.pk: "pending_approval"}
    assert (PlatformActionRequest.objects.get(pk=of_ended.pk).error or {}).get("code") == "run_ended"


def test_a_later_run_of_the_conversation_sees_the_outcome_and_no_one_else_does(host_run):
    first = host_run(resource_policy=NEEDS_APPROVAL, conversation_id="c1")
    request = _pending(first, "kept", may_outlive_run=True)
    _end(first)
    platform_action_approve(request=request, operator="alice")
    # the same runner and binding, a later run in the same conversation
    later = host_run(resource_policy=NEEDS_APPROVAL, conversation_id="c1", workspace=first.workspace)
    Run.objects.filter(pk=later.run.pk).update(runner_id=first.run.runner_id, binding_key=first.run.binding_key)
    elsewhere = host_run(resource_policy=NEEDS_APPROVAL, conversation_id="c2", workspace=first.workspace)
    other_workspace = host_run(resource_policy=NEEDS_APPROVAL, conversation_id="c1")

    assert _outcome(later, request.pk)["status"] == "executed"
    for run in (elsewhere, other_workspace):
        refused = run.refused("platform_request_action", action="action.get", target={"request_id": request.pk})
        assert refused.code == "not_found"
    assert first.refused("platform_request_action", action="action.get", target={}).code == "invalid_argument"


# --- REST ---------------------------------------------------------------------------------------------------


def test_rest_lists_pending_requests_and_approves_one(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    request, done = _pending(run, "over rest"), _pending(run, "rejected first")
    platform_action_reject(request=done, operator="bob")
    client = _client(run.workspace)

    listed = client.get("/api/v1/actions", {"status": "pending_approval"})
    assert listed.status_code == 200
    assert [item["action_id"] for item in listed.json()["items"]] == [request.pk]
    assert listed.json()["items"][0]["run_id"] == str(run.run.run_id)

    approved = client.post(f"/api/v1/actions/{request.pk}/approve")
    assert approved.status_code == 200
    assert approved.json()["status"] == "executed"
    assert approved.json()["decided_by"].startswith("api-key:")
    assert client.get(f"/api/v1/actions/{request.pk}").json()["status"] == "executed"
    again = client.post(f"/api/v1/actions/{request.pk}/approve")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "action.not_pending")
    assert TranscriptItem.objects.filter(content="over rest").count() == 1
    assert client.get("/api/v1/actions", {"status": "bogus"}).status_code == 400


def test_rest_refuses_an_approval_after_the_run_ended_or_the_expiry_with_a_code(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    after_end, overdue = _pending(run, "late"), _pending(run, "later")
    PlatformActionRequest.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    client = _client(run.workspace)

    expired = client.post(f"/api/v1/actions/{overdue.pk}/approve")
    _end(run)
    ended = client.post(f"/api/v1/actions/{after_end.pk}/approve")

    assert (expired.status_code, expired.json()["error"]["code"]) == (409, "action.expired")
    assert (ended.status_code, ended.json()["error"]["code"]) == (409, "action.run_ended")
    assert ended.json()["error"]["details"]["action"]["status"] == "expired"
    assert not TranscriptItem.objects.filter(content__in=["late", "later"]).exists()


def test_rest_rejects_and_another_workspaces_key_sees_nothing(host_run):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    request = _pending(run, "mine")
    stranger = _client(WorkspaceFactory.create())

    assert stranger.get(f"/api/v1/actions/{request.pk}").status_code == 404
    assert stranger.post(f"/api/v1/actions/{request.pk}/approve").status_code == 404
    assert stranger.post(f"/api/v1/actions/{request.pk}/reject").status_code == 404
    assert stranger.get("/api/v1/actions").json()["items"] == []
    assert stranger.get("/api/v1/actions/not-a-number").status_code == 404
    request.refresh_from_db()
    assert request.status == "pending_approval"

    rejected = _client(run.workspace).post(f"/api/v1/actions/{request.pk}/reject")
    assert (rejected.status_code, rejected.json()["status"]) == (200, "rejected")
    assert _outcome(run, request.pk)["status"] == "rejected"


# --- admin --------------------------------------------------------------------------------------------------


def test_admin_says_why_an_approval_after_the_run_ended_did_not_execute(host_run, admin_client):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    ended, outliving = _pending(run, "ended"), _pending(run, "outlives", may_outlive_run=True)
    _end(run)
    url = reverse("admin:runners_platformactionrequest_changelist")

    response = admin_client.post(url, {"action": "approve", "_selected_action": [ended.pk, outliving.pk]})

    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert "1 executed, 0 failed." in shown
    assert any(f"#{ended.pk}" in m and "run" in m and "ended" in m for m in shown), shown
    assert PlatformActionRequest.objects.get(pk=ended.pk).status == "expired"
    assert PlatformActionRequest.objects.get(pk=ended.pk).decided_by == "admin"  # the late attempt is recorded
    assert TranscriptItem.objects.filter(content="outlives").count() == 1


def test_admin_lists_an_overdue_request_as_expired_and_rejects_pending_ones(host_run, admin_client):
    run = host_run(resource_policy=NEEDS_APPROVAL)
    overdue, pending = _pending(run, "overdue"), _pending(run, "pending")
    PlatformActionRequest.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    url = reverse("admin:runners_platformactionrequest_changelist")

    listed = admin_client.get(url, {"status__exact": "pending_approval"})
    rejected = admin_client.post(url, {"action": "reject", "_selected_action": [pending.pk]})

    assert [row.pk for row in listed.context["cl"].result_list] == [pending.pk]
    assert "1 rejected." in [str(m) for m in get_messages(rejected.wsgi_request)]
    assert PlatformActionRequest.objects.get(pk=pending.pk).status == "rejected"
