"""The admin's usage report: tokens the host counted, per workspace, binding and day, scoped like every
admin page (a staff member sees only their workspaces), without cost (models have no prices yet)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from bindings.models import WorkspaceMembership
from runners.models import Run
from runners.usage_report import UsageRow, usage_by_workspace_binding_day
from tests.factories import UserFactory, WorkspaceFactory
from tests.streaming.conftest import make_run

pytestmark = pytest.mark.django_db


def host_usage(prompt: int, completion: int) -> dict[str, object]:
    tally = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {"reported_by": "runner", "host": {"models": {"m1": {**tally, "calls": 1}}, **tally}}


def finished_run(workspace, usage, *, days_ago: int = 0, binding_key: str | None = None) -> Run:
    run = make_run(workspace, status=Run.Status.COMPLETED)
    created = timezone.now() - timedelta(days=days_ago)
    Run.objects.filter(pk=run.pk).update(usage=usage, created_at=created, binding_key=binding_key or run.binding_key)
    return run


def test_usage_adds_up_the_host_counted_tokens_per_workspace_binding_and_day():
    acme = WorkspaceFactory.create(slug="acme")
    finished_run(acme, host_usage(10, 2), binding_key="support")
    finished_run(acme, host_usage(5, 1), binding_key="support")
    finished_run(acme, None, binding_key="support")  # a run without model calls
    finished_run(acme, host_usage(7, 7), binding_key="support", days_ago=1)
    finished_run(acme, {"reported_by": "runner", "total_tokens": 999}, binding_key="external")
    finished_run(acme, host_usage(100, 100), binding_key="support", days_ago=40)  # outside the window

    rows = usage_by_workspace_binding_day(workspaces=None, since=timezone.now().date() - timedelta(days=29))

    today, yesterday = timezone.now().date(), timezone.now().date() - timedelta(days=1)
    # workspace, binding, day, runs, runs with model calls, prompt, completion and total tokens
    assert [row for row in rows if row.workspace == "acme"] == [
        UsageRow("acme", "external", today, 1, 0, 0, 0, 0),
        UsageRow("acme", "support", today, 3, 2, 15, 3, 18),
        UsageRow("acme", "support", yesterday, 1, 1, 7, 7, 14),
    ]


def test_a_staff_member_sees_the_usage_of_their_workspaces_only(client):
    mine, theirs = WorkspaceFactory.create(slug="mine"), WorkspaceFactory.create(slug="theirs")
    finished_run(mine, host_usage(3, 4), binding_key="my-binding")
    finished_run(theirs, host_usage(50, 60), binding_key="their-binding")
    staff = UserFactory.create(is_staff=True)
    WorkspaceMembership.objects.create(workspace=mine, user=staff)
    client.force_login(staff)

    response = client.get("/admin/usage/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "my-binding" in page
    assert "their-binding" not in page
    assert "Cost is at each model's prices when it was called, in USD" in page


def test_usage_adds_up_the_runs_costs_per_workspace_binding_and_day():
    acme = WorkspaceFactory.create(slug="acme-cost")
    for cost in ("0.25", "0.5"):
        usage = host_usage(10, 2)
        usage["host"] = {**usage["host"], "cost": cost, "currency": "USD"}  # type: ignore[dict-item]
        finished_run(acme, usage, binding_key="support")
    finished_run(acme, host_usage(1, 1), binding_key="support")  # an unpriced model: no cost

    rows = usage_by_workspace_binding_day(workspaces=None, since=timezone.now().date())

    assert [(row.binding_key, row.runs, row.cost) for row in rows if row.workspace == "acme-cost"] == [
        ("support", 3, "0.75")
    ]


def test_a_superuser_sees_every_workspace_and_may_choose_the_period(client):
    old = WorkspaceFactory.create(slug="old-ws")
    finished_run(old, host_usage(1, 1), binding_key="old-binding", days_ago=60)
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    assert "old-binding" not in client.get("/admin/usage/").content.decode()
    assert "old-binding" in client.get("/admin/usage/?days=90").content.decode()
    assert client.get("/admin/usage/?days=junk").status_code == 200


def test_the_usage_report_is_for_staff_only(client):
    assert client.get("/admin/usage/").status_code == 302
    client.force_login(UserFactory.create(is_staff=False))
    assert client.get("/admin/usage/").status_code == 302
