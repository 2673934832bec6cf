"""The admin's usage report (`/admin/usage/`): model tokens per workspace, binding and day, read from
`Run.usage["host"]` — the figures the host counted itself on the model proxy (runners/access/usage.py),
which a runner cannot forge; what a runner reports of its own (an external agent's model) is shown on each
run, not added up here. Cost is each run's `Run.usage["host"]["cost"]`: its calls at the model's prices of
the time (runners/access/usage.py). Spend per bot and actor per day, which budgets read, is `DailySpend`'s
(its admin, and `GET /api/v1/costs`).

A superuser sees every workspace, a staff member only the workspaces they belong to (as everywhere in admin).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import BigIntegerField, Count, DecimalField, Q, QuerySet, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, TruncDate
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from bindings.models import Workspace
from bindings.selectors import workspaces_of_member
from runners.access.usage import decimal_text
from runners.models import Run

DEFAULT_DAYS = 30
MAX_DAYS = 366


@dataclass(frozen=True)
class UsageRow:
    workspace: str
    binding_key: str
    day: date
    runs: int
    runs_with_model_calls: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost: str = "0"


def _tokens(name: str) -> Any:
    return Coalesce(Sum(Cast(KT(f"usage__host__{name}"), BigIntegerField())), 0)


def usage_by_workspace_binding_day(*, workspaces: QuerySet[Workspace] | None, since: date) -> list[UsageRow]:
    """Runs created on or after `since` (UTC days), grouped by workspace, binding and day, newest day first;
    `workspaces=None` means all of them."""
    runs = Run.objects.filter(created_at__date__gte=since)
    if workspaces is not None:
        runs = runs.filter(workspace__in=workspaces)
    rows = (
        runs.annotate(day=TruncDate("created_at"))
        .values("workspace__slug", "binding_key", "day")
        .annotate(
            runs=Count("id"),
            with_calls=Count("id", filter=Q(usage__host__isnull=False)),
            prompt=_tokens("prompt_tokens"),
            completion=_tokens("completion_tokens"),
            total=_tokens("total_tokens"),
            cost=Coalesce(
                Sum(Cast(KT("usage__host__cost"), DecimalField(max_digits=24, decimal_places=12))), Decimal(0)
            ),
        )
        .order_by("-day", "workspace__slug", "binding_key")
    )
    return [
        UsageRow(
            workspace=row["workspace__slug"],
            binding_key=row["binding_key"],
            day=row["day"],
            runs=row["runs"],
            runs_with_model_calls=row["with_calls"],
            prompt_tokens=row["prompt"],
            completion_tokens=row["completion"],
            total_tokens=row["total"],
            cost=decimal_text(Decimal(row["cost"])),
        )
        for row in rows
    ]


def _days(request: HttpRequest) -> int:
    try:
        days = int(request.GET.get("days", DEFAULT_DAYS))
    except ValueError:
        days = DEFAULT_DAYS
    return min(max(days, 1), MAX_DAYS)


def usage_report_view(request: HttpRequest) -> HttpResponse:
    """Wrapped in `admin.site.admin_view` (langbot_host/urls.py): staff only, like every admin page."""
    days = _days(request)
    user = request.user
    workspaces = None if getattr(user, "is_superuser", False) else workspaces_of_member(user_id=user.pk)
    since = timezone.now().date() - timedelta(days=days - 1)
    rows = usage_by_workspace_binding_day(workspaces=workspaces, since=since)
    context = {
        **admin.site.each_context(request),
        "title": "Model usage per workspace, binding and day",
        "rows": rows,
        "days": days,
        "since": since,
        "currency": settings.LANGBOT_COST_CURRENCY,
    }
    return TemplateResponse(request, "admin/runners/usage.html", context)
