"""Budgets and what model calls spend: the spend each call adds (`spend_record`), what a budget's current
period has spent, and the check made before a run starts and before each model call (`budget_exceeded`).

Periods are UTC days and UTC months: a daily budget starts again from nothing at 00:00 UTC, a monthly one
on the 1st at 00:00 UTC. Amounts and costs are in the host's cost currency (settings.LANGBOT_COST_CURRENCY).

Spend is counted per workspace, UTC day, bot and actor (`DailySpend`), raised as each call ends, so a check
sees what runs still running have spent, not only finished ones. A call is allowed while its budgets'
spend is below their amounts; what it costs is known only once it has answered. So a budget can be
overshot by the calls that were already under way when it was reached — at most one call per run running
at that moment (a run's calls are checked one by one) — and never by a call that starts afterwards. That
tolerance is accepted rather than reserving an estimate before each call: an estimate needs the answer's
length, which is unknown, and a reservation left by a crashed worker would block a budget until cleaned.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from runners.access.scope import RunScope
from runners.access.usage import decimal_text, input_output_tokens
from runners.models import Budget, DailySpend


def utc_today() -> date:
    return timezone.now().astimezone(UTC).date()


def period_bounds(period: str, day: date) -> tuple[date, date]:
    """The first day of the period `day` is in, and the first day of the next one."""
    if period == Budget.Period.MONTH:
        first = day.replace(day=1)
        return first, first + timedelta(days=calendar.monthrange(day.year, day.month)[1])
    return day, day + timedelta(days=1)


@dataclass(frozen=True)
class BudgetExceeded:
    """A budget whose current period has spent its amount."""

    budget: Budget
    spent: Decimal
    period_start: date
    resets_at: datetime

    @property
    def message(self) -> str:
        """What the chat user and the runner are told: which budget, and when it resets; the figures are in
        `details`, for the operator."""
        budget = self.budget
        if budget.scope == Budget.Scope.BOT and budget.bot is not None:
            whose = f"bot {budget.bot.bot_id}"
        elif budget.scope == Budget.Scope.ACTOR:
            whose = "each user" if not budget.actor_id else "this user"
        else:
            whose = "this workspace"
        when = "daily" if budget.period == Budget.Period.DAY else "monthly"
        reset = self.resets_at.strftime("%Y-%m-%d %H:%M UTC")
        return f"The {when} model budget of {whose} is used up; it resets at {reset}."

    def details(self) -> dict[str, Any]:
        budget = self.budget
        return {
            "budget_id": str(budget.budget_id),
            "scope": budget.scope,
            "bot_id": budget.bot.bot_id if budget.bot is not None else None,
            "actor_id": budget.actor_id or None,
            "period": budget.period,
            "amount": decimal_text(budget.amount),
            "spent": decimal_text(self.spent),
            "currency": settings.LANGBOT_COST_CURRENCY,
            "period_start": self.period_start.isoformat(),
            "resets_at": self.resets_at.isoformat(),
        }


def budgets_applying(*, workspace_id: int, bot_id: str, actor_id: str) -> list[Budget]:
    """The enabled budgets a run of this bot and actor counts against (an actor budget without an actor id
    applies to every actor; a run without an actor counts against no actor budget)."""
    applies = Q(scope=Budget.Scope.WORKSPACE)
    if bot_id:
        applies |= Q(scope=Budget.Scope.BOT, bot__bot_id=bot_id)
    if actor_id:
        applies |= Q(scope=Budget.Scope.ACTOR, actor_id__in=[actor_id, ""])
    budgets = Budget.objects.filter(applies, workspace_id=workspace_id, enabled=True).select_related("bot")
    return list(budgets.order_by("id"))


def budget_spent(*, budget: Budget, actor_id: str = "", day: date | None = None) -> Decimal:
    """What the budget's period containing `day` (today, UTC) has spent so far; `actor_id` names the actor
    an each-actor budget is read for."""
    start, _ = period_bounds(budget.period, day or utc_today())
    spend = DailySpend.objects.filter(workspace_id=budget.workspace_id, day__gte=start, day__lte=day or utc_today())
    if budget.scope == Budget.Scope.BOT:
        spend = spend.filter(bot_key=budget.bot.bot_id if budget.bot is not None else "")
    elif budget.scope == Budget.Scope.ACTOR:
        spend = spend.filter(actor_key=budget.actor_id or actor_id)
    total = spend.aggregate(total=Sum("cost"))["total"]
    return Decimal(total or 0)


def budget_exceeded(*, scope: RunScope, day: date | None = None) -> BudgetExceeded | None:
    """The first budget of the run's workspace, bot or actor whose current period is spent, else None.
    Cheap when the workspace has no budgets: one indexed query."""
    day = day or utc_today()
    for budget in budgets_applying(workspace_id=scope.workspace_id, bot_id=scope.bot_id, actor_id=scope.actor_id):
        spent = budget_spent(budget=budget, actor_id=scope.actor_id, day=day)
        if spent >= budget.amount:
            start, end = period_bounds(budget.period, day)
            return BudgetExceeded(
                budget=budget, spent=spent, period_start=start, resets_at=datetime.combine(end, time(), tzinfo=UTC)
            )
    return None


def spend_record(
    *, scope: RunScope, cost: Decimal | None, usage: dict[str, Any] | None, day: date | None = None
) -> None:
    """Add one model call to today's spend of the run's workspace, bot and actor (an increment, so two
    calls ending at once both count)."""
    prompt, completion = input_output_tokens(usage)
    key = {
        "workspace_id": scope.workspace_id,
        "day": day or utc_today(),
        "bot_key": scope.bot_id[:64],
        "actor_key": scope.actor_id[:255],
    }
    cost = cost or Decimal(0)
    increments = {
        "cost": F("cost") + cost,
        "prompt_tokens": F("prompt_tokens") + prompt,
        "completion_tokens": F("completion_tokens") + completion,
        "calls": F("calls") + 1,
    }
    if DailySpend.objects.filter(**key).update(**increments):
        return
    try:
        with transaction.atomic():
            DailySpend.objects.create(**key, cost=cost, prompt_tokens=prompt, completion_tokens=completion, calls=1)
    except IntegrityError:
        # Another call made the row first.
        DailySpend.objects.filter(**key).update(**increments)
