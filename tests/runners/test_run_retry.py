"""Automatic retry (`delivery_policy.retry`): a run lost to a host-side fault gets a new attempt when its
binding opted in, up to `max_attempts` runs per event; the attempt number and the run retried show on
`GET /runs/{id}`. Runs end here the way the sweeper ends them when their worker is gone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runners.lifecycle.services import runs_sweep
from runners.models import Run
from tests.gateway.support import binding_for, message, post_event

pytestmark = pytest.mark.django_db


def start_run(client, event_id: str) -> Run:
    response = post_event(client, message("hi", conversation_id="c-1", event_id=event_id))
    assert response.status_code == 202, response.content
    [run] = response.json()["runs"]
    return Run.objects.get(run_id=run["run_id"])


def lose_worker(run: Run) -> Run:
    """The run was running on a worker that died: the sweep fails it `worker_lost` (retryable)."""
    past = timezone.now() - timedelta(seconds=5)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, started_at=past, lease_expires_at=past)
    runs_sweep()
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    return run


def attempts_of(run: Run) -> list[Run]:
    return list(Run.objects.filter(event_id=run.event_id).order_by("id"))


def test_a_lost_run_is_retried_until_the_attempts_run_out(api_client, workspace):
    binding_for(workspace, concurrency_policy="parallel", delivery_policy={"retry": {"max_attempts": 3}})
    first = lose_worker(start_run(api_client, "evt-r1"))

    [_, second] = attempts_of(first)
    assert second.status == Run.Status.QUEUED
    assert second.binding_key == first.binding_key
    shown = api_client.get(f"/api/v1/runs/{second.run_id}").json()
    assert (shown["attempt"], shown["retry_of"]) == (2, str(first.run_id))
    assert api_client.get(f"/api/v1/runs/{first.run_id}").json()["attempt"] == 1

    lose_worker(second)
    [_, _, third] = attempts_of(first)
    assert api_client.get(f"/api/v1/runs/{third.run_id}").json()["retry_of"] == str(second.run_id)

    lose_worker(third)
    assert len(attempts_of(first)) == 3  # max_attempts counts the first run


def test_without_the_policy_a_lost_run_stays_failed(api_client, workspace):
    binding_for(workspace, concurrency_policy="parallel")
    first = lose_worker(start_run(api_client, "evt-r2"))

    assert attempts_of(first) == [first]
    shown = api_client.get(f"/api/v1/runs/{first.run_id}").json()
    assert (shown["attempt"], shown["retry_of"]) == (1, None)


def test_a_failure_of_the_runner_itself_is_not_retried(api_client, workspace):
    from runners.lifecycle.retry import runs_retry

    binding_for(workspace, concurrency_policy="parallel", delivery_policy={"retry": {"max_attempts": 3}})
    run = start_run(api_client, "evt-r3")
    error = {"code": "runner.error", "message": "no", "retryable": True, "details": {}}
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, error=error, finished_at=timezone.now())
    run.refresh_from_db()

    runs_retry([run])

    assert attempts_of(run) == [run]


def test_the_retry_policy_is_bounded_and_reads_back_over_rest(api_client, workspace):
    binding_for(workspace, binding_id="b-retry")
    too_many = api_client.patch(
        "/api/v1/bindings/b-retry", {"delivery_policy": {"retry": {"max_attempts": 50}}}, format="json"
    )
    assert too_many.status_code == 400, too_many.content

    policy = {"retry": {"max_attempts": 2, "backoff_seconds": 1.5}}
    changed = api_client.patch("/api/v1/bindings/b-retry", {"delivery_policy": policy}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["delivery_policy"]["retry"] == {"max_attempts": 2, "backoff_seconds": 1.5}


def test_the_admin_run_page_links_a_retry_to_the_run_it_retried(api_client, workspace):
    from django.test import Client
    from django.urls import reverse

    from tests.factories import UserFactory

    binding_for(workspace, concurrency_policy="parallel", delivery_policy={"retry": {"max_attempts": 2}})
    first = lose_worker(start_run(api_client, "evt-r4"))
    [_, second] = attempts_of(first)
    admin = Client()
    admin.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))

    html = admin.get(reverse("admin:runners_run_change", args=[second.pk])).content.decode()

    assert "automatic retry of" in html
    assert reverse("admin:runners_run_change", args=[first.pk]) in html
