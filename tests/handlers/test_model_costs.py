"""What model calls cost and the budgets they count against: a priced model's calls give the run a cost at
the prices of the time, the workspace's spend per day, bot and actor grows with each call, and a call past a
budget is refused with `quota_exceeded` before the provider is asked; budgets start again each UTC day or
month; two runs at once overshoot a budget by at most the calls they had under way."""

from __future__ import annotations

import threading
from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from langbot_sdk.protocol import AgentAPIException
from resources.models import Model
from runners.access.budgets import budget_exceeded
from runners.access.scope import RunScope
from runners.models import Budget, DailySpend
from tests.factories import BotFactory, WorkspaceFactory
from tests.fakes.openai_server import completion

HI = [{"role": "user", "content": "hi"}]
# 1000 prompt + 500 completion tokens at 2 / 8 per million: 0.002 + 0.004 = 0.006.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}


def _priced(run: Any, input_price: str = "2", output_price: str = "8") -> None:
    Model.objects.filter(workspace=run.workspace, model_id="m1").update(
        input_price_per_million=Decimal(input_price), output_price_per_million=Decimal(output_price)
    )


def _spend(workspace: Any) -> Decimal:
    return sum((row.cost for row in DailySpend.objects.filter(workspace=workspace)), Decimal(0))


@pytest.fixture
def run(model_run):
    return model_run()


def test_a_priced_call_costs_its_tokens_at_the_prices_of_the_time(run, fake):
    _priced(run)
    fake.reply(completion("one", usage=USAGE))
    run.call("invoke_llm", model_id="m1", messages=HI)
    # The price changes: the call made before keeps its cost, the next one is at the new price.
    _priced(run, input_price="4", output_price="8")
    fake.reply(completion("two", usage=USAGE))
    run.call("invoke_llm", model_id="m1", messages=HI)

    host = run.built.session.usage.as_usage()
    assert host["models"]["m1"]["cost"] == "0.014"  # 0.006 + (0.004 + 0.004)
    assert host["cost"] == "0.014"
    assert host["currency"] == "USD"
    spend = DailySpend.objects.get(workspace=run.workspace)
    assert (spend.actor_key, spend.bot_key, spend.calls) == ("user:u1", "", 2)
    assert (spend.prompt_tokens, spend.completion_tokens) == (2000, 1000)
    assert spend.cost == Decimal("0.014")


def test_an_unpriced_model_has_no_cost_and_spends_nothing(run, fake):
    fake.reply(completion("one", usage=USAGE))
    run.call("invoke_llm", model_id="m1", messages=HI)

    host = run.built.session.usage.as_usage()
    assert "cost" not in host
    assert "cost" not in host["models"]["m1"]
    assert _spend(run.workspace) == 0
    assert DailySpend.objects.get(workspace=run.workspace).calls == 1


def test_a_call_past_the_workspace_budget_is_refused_before_the_provider_is_asked(run, fake):
    _priced(run)
    Budget.objects.create(workspace=run.workspace, amount=Decimal("0.005"), period=Budget.Period.DAY)
    fake.reply(completion("one", usage=USAGE))
    run.call("invoke_llm", model_id="m1", messages=HI)  # 0.006: the budget is now used up

    refused = run.refused("invoke_llm_stream", model_id="m1", messages=HI)

    assert refused.code == "quota_exceeded"
    assert not refused.retryable
    assert "daily model budget of this workspace is used up" in refused.error.message
    assert refused.error.details["amount"] == "0.005"
    assert refused.error.details["spent"] == "0.006"
    assert len(fake.requests) == 1
    # The operator sees on the run why its calls stopped.
    assert run.built.session.usage.as_usage()["quota_exceeded"]["budget_id"] == refused.error.details["budget_id"]


def test_a_disabled_budget_or_another_bots_budget_does_not_apply(run, fake):
    _priced(run)
    other_bot = BotFactory.create(workspace=run.workspace)
    Budget.objects.create(workspace=run.workspace, amount=Decimal(0), enabled=False)
    Budget.objects.create(workspace=run.workspace, scope=Budget.Scope.BOT, bot=other_bot, amount=Decimal(0))
    Budget.objects.create(workspace=run.workspace, scope=Budget.Scope.ACTOR, actor_id="user:u2", amount=Decimal(0))
    fake.reply(completion("one", usage=USAGE))

    assert run.call("invoke_llm", model_id="m1", messages=HI)["message"]["content"] == "one"


def test_an_each_actor_budget_refuses_only_the_actor_who_spent_it(run, fake):
    _priced(run)
    Budget.objects.create(workspace=run.workspace, scope=Budget.Scope.ACTOR, amount=Decimal("0.006"))
    fake.reply(completion("one", usage=USAGE))
    run.call("invoke_llm", model_id="m1", messages=HI)

    refused = run.refused("invoke_llm", model_id="m1", messages=HI)
    assert refused.code == "quota_exceeded"
    assert "each user" in refused.error.message
    other = RunScope(workspace_id=run.workspace.pk, workspace=run.workspace.slug, runner_id="r", binding_id="b")
    assert budget_exceeded(scope=other) is None  # no actor: no actor budget
    assert budget_exceeded(scope=RunScope(**{**other.as_dict(), "actor_id": "user:u2"})) is None


def test_daily_and_monthly_budgets_start_again_at_their_utc_period_boundary(db):
    workspace = WorkspaceFactory.create()
    bot = BotFactory.create(workspace=workspace)
    scope = RunScope(
        workspace_id=workspace.pk, workspace=workspace.slug, runner_id="r", binding_id="b", bot_id=bot.bot_id
    )
    DailySpend.objects.create(workspace=workspace, day=date(2026, 3, 31), bot_key=bot.bot_id, cost=Decimal(5))
    DailySpend.objects.create(workspace=workspace, day=date(2026, 4, 1), bot_key=bot.bot_id, cost=Decimal(1))
    daily = Budget.objects.create(workspace=workspace, scope=Budget.Scope.BOT, bot=bot, amount=Decimal(4))
    monthly = Budget.objects.create(workspace=workspace, period=Budget.Period.MONTH, amount=Decimal(3))

    on_31st = budget_exceeded(scope=scope, day=date(2026, 3, 31))
    assert on_31st is not None
    assert on_31st.budget == daily
    assert on_31st.resets_at.isoformat() == "2026-04-01T00:00:00+00:00"
    # The 1st of April: yesterday's 5 count for neither the day nor the new month.
    assert budget_exceeded(scope=scope, day=date(2026, 4, 1)) is None
    DailySpend.objects.filter(day=date(2026, 4, 1)).update(cost=Decimal(3))
    on_1st = budget_exceeded(scope=scope, day=date(2026, 4, 2))
    assert on_1st is not None
    assert on_1st.budget == monthly
    assert on_1st.resets_at.isoformat() == "2026-05-01T00:00:00+00:00"
    assert budget_exceeded(scope=scope, day=date(2026, 5, 1)) is None


def test_two_runs_at_once_overshoot_a_budget_by_at_most_one_call_each(model_run, host_run, fake):
    first = model_run()
    second = host_run(workspace=first.workspace, config={"model": "m1"}, resource_policy={"allowed_model_ids": ["m1"]})
    _priced(first)
    Budget.objects.create(workspace=first.workspace, amount=Decimal("0.006"))
    for _ in range(10):
        fake.reply(completion("x", usage=USAGE))
    outcomes: list[str] = []

    def calls(run: Any) -> None:
        for _ in range(5):
            try:
                run.call("invoke_llm", model_id="m1", messages=HI)
                outcomes.append("ok")
            except AgentAPIException as exc:
                outcomes.append(exc.code)

    threads = [threading.Thread(target=calls, args=(run,)) for run in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # One call uses the budget up; a second may have started beside it; none starts afterwards.
    assert 1 <= outcomes.count("ok") <= 2
    assert outcomes.count("quota_exceeded") == 10 - outcomes.count("ok")
    assert _spend(first.workspace) <= Decimal("0.006") * 2
