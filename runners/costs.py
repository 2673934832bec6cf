"""Budgets as the REST API and the admin edit them, and the spend they read (`DailySpend`) as they show it:
input shapes, the budget services and the cost selectors. What a run spends and the checks made against
budgets while runs run are runners/access/budgets.py's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Annotated, Any, Literal

from django.conf import settings
from django.db.models import QuerySet, Sum
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bindings.models import Bot, Workspace
from bindings.specs import Slug
from foundation.api_errors import field_errors
from runners.access.budgets import budget_spent, period_bounds, utc_today
from runners.access.usage import decimal_text
from runners.models import Budget, DailySpend

Amount = Annotated[Decimal, Field(ge=0, max_digits=14, decimal_places=6)]
ActorId = Annotated[str, Field(max_length=255)]
GroupBy = Literal["workspace", "bot", "actor"]


class BudgetValidationError(Exception):
    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__(fields)
        self.fields = fields


class BudgetIn(BaseModel):
    """A whole budget, as created (or as a PATCH leaves it)."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["workspace", "bot", "actor"] = "workspace"
    bot_id: Slug | None = None
    """The bot of a `bot` budget."""
    actor_id: ActorId = ""
    """For an `actor` budget: the actor as runs name it, `type:id` (e.g. `user:42`); empty: each actor has
    the amount to spend on their own."""
    period: Literal["day", "month"] = "day"
    """UTC days or UTC months."""
    amount: Amount
    """In the host's cost currency (`LANGBOT_COST_CURRENCY`), as a decimal string or number."""
    enabled: bool = True
    name: str = Field(default="", max_length=200)


class BudgetPatchIn(BaseModel):
    """Any subset of `BudgetIn`'s keys (`bot_id` may be set to null with a scope that has none)."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["workspace", "bot", "actor"] | None = None
    bot_id: Slug | None = None
    actor_id: ActorId | None = None
    period: Literal["day", "month"] | None = None
    amount: Amount | None = None
    enabled: bool | None = None
    name: str | None = Field(default=None, max_length=200)


def _fields(budget: Budget) -> dict[str, Any]:
    return {
        "scope": budget.scope,
        "bot_id": budget.bot.bot_id if budget.bot is not None else None,
        "actor_id": budget.actor_id,
        "period": budget.period,
        "amount": budget.amount,
        "enabled": budget.enabled,
        "name": budget.name,
    }


def _apply(budget: Budget, spec: BudgetIn) -> Budget:
    errors: dict[str, str] = {}
    bot = None
    if spec.scope == "bot":
        if spec.bot_id is None:
            errors["bot_id"] = "A bot budget names its bot."
        else:
            bot = Bot.objects.filter(workspace=budget.workspace, bot_id=spec.bot_id).first()
            if bot is None:
                errors["bot_id"] = f"No bot {spec.bot_id!r} in this workspace."
    elif spec.bot_id is not None:
        errors["bot_id"] = "Only a bot budget names a bot."
    if spec.actor_id and spec.scope != "actor":
        errors["actor_id"] = "Only an actor budget names an actor."
    if errors:
        raise BudgetValidationError(errors)
    budget.scope, budget.bot, budget.actor_id = spec.scope, bot, spec.actor_id
    budget.period, budget.amount, budget.enabled, budget.name = spec.period, spec.amount, spec.enabled, spec.name
    budget.save()
    return budget


def budget_create(*, workspace: Workspace, spec: BudgetIn) -> Budget:
    return _apply(Budget(workspace=workspace), spec)


def budget_update(*, budget: Budget, patch: BudgetPatchIn) -> Budget:
    given = patch.model_dump(mode="json", include=patch.model_fields_set)
    nulls = {name: "May not be null." for name, value in given.items() if value is None and name != "bot_id"}
    if nulls:
        raise BudgetValidationError(nulls)
    try:
        spec = BudgetIn.model_validate({**_fields(budget), **given})
    except ValidationError as exc:
        raise BudgetValidationError(field_errors(exc)) from None
    return _apply(budget, spec)


def budget_list(*, workspace: Workspace) -> QuerySet[Budget]:
    return Budget.objects.filter(workspace=workspace).select_related("bot").order_by("id")


def budget_get(*, workspace: Workspace, budget_id: uuid.UUID) -> Budget | None:
    return budget_list(workspace=workspace).filter(budget_id=budget_id).first()


@dataclass(frozen=True)
class BudgetStatus:
    """A budget's current period: what it has spent and when it starts again."""

    spent: Decimal
    period_start: date
    resets_at: datetime

    @property
    def as_dict(self) -> dict[str, Any]:
        return {
            "spent": decimal_text(self.spent),
            "period_start": self.period_start.isoformat(),
            "resets_at": self.resets_at.isoformat(),
        }


def budget_status(*, budget: Budget, day: date | None = None) -> BudgetStatus:
    """The current period of the budget (an each-actor budget's spent is the most any one actor spent)."""
    day = day or utc_today()
    start, end = period_bounds(budget.period, day)
    if budget.scope == Budget.Scope.ACTOR and not budget.actor_id:
        per_actor = (
            DailySpend.objects.filter(workspace_id=budget.workspace_id, day__gte=start, day__lte=day)
            .exclude(actor_key="")
            .values("actor_key")
            .annotate(total=Sum("cost"))
            .order_by("-total")
            .first()
        )
        spent = Decimal(per_actor["total"] or 0) if per_actor else Decimal(0)
    else:
        spent = budget_spent(budget=budget, day=day)
    return BudgetStatus(spent=spent, period_start=start, resets_at=datetime.combine(end, time(), tzinfo=UTC))


def budget_out(budget: Budget) -> dict[str, Any]:
    return {
        "budget_id": str(budget.budget_id),
        **_fields(budget),
        "amount": decimal_text(budget.amount),
        "currency": settings.LANGBOT_COST_CURRENCY,
        **budget_status(budget=budget).as_dict,
        "created_at": budget.created_at.isoformat(),
        "updated_at": budget.updated_at.isoformat(),
    }


# --- cost per day ------------------------------------------------------------------------------------


def costs_by_day(
    *, workspaces: QuerySet[Workspace] | None, since: date, until: date, group_by: GroupBy
) -> list[dict[str, Any]]:
    """Model spend per UTC day from `since` to `until` (inclusive), newest first, per workspace and — with
    `group_by` bot or actor — per bot or actor; `workspaces=None` means all of them."""
    spend = DailySpend.objects.filter(day__gte=since, day__lte=until)
    if workspaces is not None:
        spend = spend.filter(workspace__in=workspaces)
    keys = ["day", "workspace__slug"] + {"workspace": [], "bot": ["bot_key"], "actor": ["actor_key"]}[group_by]
    rows = (
        spend.values(*keys)
        .annotate(
            cost=Sum("cost"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            calls=Sum("calls"),
        )
        .order_by("-day", *keys[1:])
    )
    currency = settings.LANGBOT_COST_CURRENCY
    items = []
    for row in rows:
        item: dict[str, Any] = {"day": row["day"].isoformat(), "workspace": row["workspace__slug"]}
        if group_by == "bot":
            item["bot_id"] = row["bot_key"] or None
        elif group_by == "actor":
            item["actor_id"] = row["actor_key"] or None
        item |= {
            "cost": decimal_text(Decimal(row["cost"] or 0)),
            "currency": currency,
            "prompt_tokens": row["prompt"] or 0,
            "completion_tokens": row["completion"] or 0,
            "calls": row["calls"] or 0,
        }
        items.append(item)
    return items
