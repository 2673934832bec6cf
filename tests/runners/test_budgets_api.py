"""Budgets and costs through REST and the admin: a budget names a bot or an actor only with the scope that
has one, another workspace's budget is not there, `spent` and `resets_at` describe the current UTC
period, and the costs answer adds up the day's spend per workspace, bot or actor."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from runners.access.budgets import utc_today
from runners.models import Budget, DailySpend
from tests.factories import BotFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


def test_a_bot_budget_is_created_read_changed_and_deleted(api_client, workspace):
    BotFactory.create(workspace=workspace, bot_id="support")
    body = {"scope": "bot", "bot_id": "support", "amount": "2.5", "period": "month"}

    created = api_client.post("/api/v1/budgets", body, format="json")

    assert created.status_code == 201, created.content
    budget = created.json()
    assert (budget["scope"], budget["bot_id"], budget["amount"], budget["currency"]) == ("bot", "support", "2.5", "USD")
    assert (budget["spent"], budget["period_start"]) == ("0", utc_today().replace(day=1).isoformat())
    url = f"/api/v1/budgets/{budget['budget_id']}"
    assert api_client.get(url).json() == budget
    assert api_client.patch(url, {"enabled": False}, format="json").json()["enabled"] is False
    assert api_client.delete(url).status_code == 204
    assert api_client.get(url).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "bot", "amount": "1"}, "bot_id"),
        ({"scope": "bot", "bot_id": "nope", "amount": "1"}, "bot_id"),
        ({"scope": "workspace", "actor_id": "user:1", "amount": "1"}, "actor_id"),
        ({"amount": "-1"}, "amount"),
        ({"amount": "1", "period": "week"}, "period"),
        ({"period": "day"}, "amount"),
    ],
)
def test_a_budget_that_cannot_apply_is_a_field_error(api_client, body, field):
    response = api_client.post("/api/v1/budgets", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]


def test_another_workspaces_budget_and_spend_are_not_there(api_client, workspace):
    theirs = Budget.objects.create(workspace=WorkspaceFactory.create(), amount=Decimal(1))
    DailySpend.objects.create(workspace=theirs.workspace, day=utc_today(), cost=Decimal(3), calls=1)

    assert api_client.get(f"/api/v1/budgets/{theirs.budget_id}").status_code == 404
    assert api_client.patch(f"/api/v1/budgets/{theirs.budget_id}", {"amount": "9"}, format="json").status_code == 404
    assert api_client.get("/api/v1/budgets").json()["items"] == []
    assert api_client.get("/api/v1/costs").json()["items"] == []
    assert api_client.get("/api/v1/budgets/not-a-uuid").status_code == 404


def test_costs_per_day_add_up_per_workspace_bot_or_actor(api_client, workspace):
    today = utc_today()
    yesterday = today - timedelta(days=1)
    for day, bot, actor, cost in [
        (today, "a", "user:1", "0.5"),
        (today, "a", "user:2", "0.25"),
        (today, "b", "user:1", "1"),
        (yesterday, "a", "user:1", "2"),
    ]:
        DailySpend.objects.create(
            workspace=workspace, day=day, bot_key=bot, actor_key=actor, cost=Decimal(cost), calls=1, prompt_tokens=10
        )

    whole = api_client.get("/api/v1/costs").json()
    per_actor = api_client.get(f"/api/v1/costs?group_by=actor&since={today}").json()["items"]

    assert [(i["day"], i["cost"], i["calls"], i["prompt_tokens"]) for i in whole["items"]] == [
        (today.isoformat(), "1.75", 3, 30),
        (yesterday.isoformat(), "2", 1, 10),
    ]
    assert [(i["actor_id"], i["cost"]) for i in per_actor] == [("user:1", "1.5"), ("user:2", "0.25")]
    assert api_client.get("/api/v1/costs?group_by=model").status_code == 400
    assert api_client.get("/api/v1/costs?since=yesterday").status_code == 400


def test_an_each_actor_budget_shows_what_the_actor_who_spent_most_spent(api_client, workspace):
    budget = Budget.objects.create(workspace=workspace, scope=Budget.Scope.ACTOR, amount=Decimal(1))
    DailySpend.objects.create(workspace=workspace, day=utc_today(), actor_key="user:1", cost=Decimal("0.3"))
    DailySpend.objects.create(workspace=workspace, day=utc_today(), actor_key="user:2", cost=Decimal("0.7"))

    assert api_client.get(f"/api/v1/budgets/{budget.budget_id}").json()["spent"] == "0.7"


def test_the_admin_lists_budgets_with_their_spend_and_the_daily_spend(admin_client, workspace):
    bot = BotFactory.create(workspace=workspace)
    DailySpend.objects.create(workspace=workspace, day=utc_today(), bot_key=bot.bot_id, cost=Decimal("0.4"))

    added = admin_client.post(
        "/admin/runners/budget/add/",
        {"workspace": workspace.pk, "scope": "bot", "bot": bot.pk, "period": "day", "amount": "1", "enabled": "on"},
    )

    assert added.status_code == 302, added.content[:3000]
    assert b"0.4 USD" in admin_client.get("/admin/runners/budget/").content
    assert b"0.4 USD" in admin_client.get("/admin/runners/dailyspend/").content
    refused = admin_client.post(
        "/admin/runners/budget/add/", {"workspace": workspace.pk, "scope": "bot", "period": "day", "amount": "1"}
    )
    assert b"A bot budget names its bot." in refused.content
