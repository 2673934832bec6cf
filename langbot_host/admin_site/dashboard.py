"""The admin home's figures, read for one person: a superuser sees the whole host, any other staff member only
the workspaces they belong to. Every figure here is a read (selectors only); the page that shows them is
`langbot_host.admin_site.site.ConsoleAdminSite.index`.

The window is the last `hours` hours up to `now`, in whole hours (UTC), so the per-hour series line up with the
clock and a test can name the hour a run falls in. Runs count by `created_at`; a run's time is
`finished_at - started_at` of the runs that finished in the window; the success rate is completed runs among
the runs that ended in the window other than cancelled ones (an operator's cancel is not a failure of the
runner, and the time of a run cut short says nothing of the runner's), which the run times are read from
too. Tokens and cost per model add up `Run.usage["host"]["models"]`, the figures the host counted on its
own model proxy (runners/access/usage.py), which a runner cannot forge.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Min, Q, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone
from django.utils.translation import gettext

from bindings.models import Bot, Workspace
from bindings.selectors import workspaces_of_member
from platforms.adapters.onebot import OneBotAdapter
from platforms.alerts.models import Alert
from platforms.alerts.selectors import alerts_open
from platforms.connectors import connected_platforms, connection_label, connection_statuses
from runners.access.usage import decimal_text
from runners.models import Run
from transcripts.models import TranscriptItem

DEFAULT_HOURS = 24
FAILING_BINDINGS = 5
BOTS_SHOWN = 20
ALERTS_SHOWN = 20
_FAILED = (Run.Status.FAILED, Run.Status.TIMEOUT)
_MESSAGE_ROLES = (TranscriptItem.Role.USER, TranscriptItem.Role.ASSISTANT)
_BUILT_IN = (Bot.Platform.WEBUI, Bot.Platform.API)


@dataclass(frozen=True)
class HourCount:
    hour: datetime
    runs: int
    messages: int


@dataclass(frozen=True)
class ModelFigures:
    model_id: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: str  # a decimal string; "0" for a model without prices


@dataclass(frozen=True)
class BotState:
    pk: int
    label: str
    platform: str
    enabled: bool
    state: str  # what people read: "disabled", "webhook", "connected", "reconnecting: …", …
    healthy: bool | None  # None: nothing holds a connection for this bot to be healthy or not


@dataclass(frozen=True)
class FailingBinding:
    workspace: str
    binding_key: str
    binding_pk: int | None
    failed: int
    runs: int


@dataclass(frozen=True)
class Dashboard:
    since: datetime
    until: datetime
    hours: int
    workspaces: list[str] | None  # None: the whole host
    per_hour: list[HourCount]
    runs: int
    messages: int
    ended: int
    completed: int
    success_rate: float | None  # 0..1; None when no run ended in the window
    p50_seconds: float | None
    p95_seconds: float | None
    models: list[ModelFigures]
    currency: str
    active_conversations: int
    bots: list[BotState]
    failing_bindings: list[FailingBinding]
    queued: int
    oldest_queued_at: datetime | None
    running: int
    alerts: list[Alert]  # the open alerts, longest-standing first (at most ALERTS_SHOWN)
    alerts_open: int


def visible_workspaces(*, user: Any) -> QuerySet[Workspace] | None:
    """None for a superuser (every workspace), else the workspaces the user is a member of."""
    if getattr(user, "is_superuser", False):
        return None
    return workspaces_of_member(user_id=getattr(user, "pk", None))


def _scoped(queryset: QuerySet[Any], workspaces: QuerySet[Workspace] | None) -> QuerySet[Any]:
    return queryset if workspaces is None else queryset.filter(workspace__in=workspaces)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile (the smallest value at least `fraction` of the values are at or under);
    None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(math.ceil(fraction * len(ordered)), 1)
    return ordered[rank - 1]


def _hourly(queryset: QuerySet[Any], field_name: str) -> Counter[datetime]:
    rows = queryset.annotate(hour=TruncHour(field_name)).values("hour").annotate(n=Count("id"))
    return Counter({row["hour"]: row["n"] for row in rows})


def _decimal(value: Any) -> Decimal:
    try:
        return Decimal(str(value)) if value is not None else Decimal(0)
    except InvalidOperation:
        return Decimal(0)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def model_figures(usages: Iterable[Any]) -> list[ModelFigures]:
    """Calls, tokens and cost per model id over runs' stored usage, most tokens first."""
    calls: Counter[str] = Counter()
    prompt: Counter[str] = Counter()
    completion: Counter[str] = Counter()
    cost: dict[str, Decimal] = {}
    for usage in usages:
        host = usage.get("host") if isinstance(usage, dict) else None
        models = host.get("models") if isinstance(host, dict) else None
        if not isinstance(models, dict):
            continue
        for model_id, tally in models.items():
            if not isinstance(tally, dict):
                continue
            calls[model_id] += _int(tally.get("calls"))
            prompt[model_id] += _int(tally.get("prompt_tokens"))
            completion[model_id] += _int(tally.get("completion_tokens"))
            cost[model_id] = cost.get(model_id, Decimal(0)) + _decimal(tally.get("cost"))
    ids = sorted(calls, key=lambda m: (-(prompt[m] + completion[m]), m))
    return [ModelFigures(m, calls[m], prompt[m], completion[m], decimal_text(cost[m])) for m in ids]


def bot_states(bots: Iterable[Bot]) -> list[BotState]:
    """Each bot's connection as people read it: one the connector process (or OneBot's socket) holds reads
    its last reported status; a bot of a platform that calls the host reads `webhook`, the debug chat's and
    the API's `built in`: neither has a connection to lose."""
    bots = list(bots)
    held = {*connected_platforms(), OneBotAdapter.platform}
    statuses = connection_statuses([bot for bot in bots if bot.enabled and bot.platform in held])
    states = []
    for bot in bots:
        if not bot.enabled:
            state, healthy = gettext("disabled"), None
        elif bot.platform in held:
            status = statuses.get(bot.pk)
            state = connection_label(status)
            healthy = status is not None and status.get("state") == "connected"
        elif bot.platform in _BUILT_IN:
            state, healthy = gettext("built in"), None
        else:
            state, healthy = gettext("webhook"), None
        states.append(BotState(bot.pk, str(bot), bot.get_platform_display(), bot.enabled, state, healthy))
    return states


def dashboard_for(*, user: Any, hours: int = DEFAULT_HOURS, now: datetime | None = None) -> Dashboard:
    workspaces = visible_workspaces(user=user)
    now = now or timezone.now()
    until = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    since = until - timedelta(hours=hours)

    runs = _scoped(Run.objects.all(), workspaces)
    in_window = runs.filter(created_at__gte=since, created_at__lt=until)
    messages = _scoped(TranscriptItem.objects.filter(role__in=_MESSAGE_ROLES), workspaces).filter(
        created_at__gte=since, created_at__lt=until
    )
    run_hours = _hourly(in_window, "created_at")
    message_hours = _hourly(messages, "created_at")
    per_hour = []
    for step in range(hours):
        hour = since + timedelta(hours=step)
        per_hour.append(HourCount(hour, run_hours.get(hour, 0), message_hours.get(hour, 0)))

    ended = runs.filter(finished_at__gte=since, finished_at__lt=until).exclude(status=Run.Status.CANCELLED)
    outcome = ended.aggregate(ended=Count("id"), completed=Count("id", filter=Q(status=Run.Status.COMPLETED)))
    durations = [
        (finished - started).total_seconds()
        for started, finished in ended.filter(started_at__isnull=False).values_list("started_at", "finished_at")
    ]
    queued = runs.filter(status=Run.Status.QUEUED).aggregate(n=Count("id"), oldest=Min("created_at"))

    failing = (
        in_window.values("workspace__slug", "binding_key")
        .annotate(failed=Count("id", filter=Q(status__in=_FAILED)), total=Count("id"), binding_pk=Max("binding_id"))
        .filter(failed__gt=0)
        .order_by("-failed", "workspace__slug", "binding_key")[:FAILING_BINDINGS]
    )
    bots = _scoped(Bot.objects.select_related("workspace"), workspaces).order_by(
        "-enabled", "workspace__slug", "bot_id"
    )

    return Dashboard(
        since=since,
        until=until,
        hours=hours,
        workspaces=None if workspaces is None else sorted(workspaces.values_list("slug", flat=True)),
        per_hour=per_hour,
        runs=sum(run_hours.values()),
        messages=sum(message_hours.values()),
        ended=outcome["ended"],
        completed=outcome["completed"],
        success_rate=outcome["completed"] / outcome["ended"] if outcome["ended"] else None,
        p50_seconds=percentile(durations, 0.50),
        p95_seconds=percentile(durations, 0.95),
        models=model_figures(in_window.filter(usage__host__isnull=False).values_list("usage", flat=True).iterator()),
        currency=settings.LANGBOT_COST_CURRENCY,
        active_conversations=messages.values("workspace_id", "conversation_id").distinct().count(),
        bots=bot_states(bots[:BOTS_SHOWN]),
        failing_bindings=[
            FailingBinding(row["workspace__slug"], row["binding_key"], row["binding_pk"], row["failed"], row["total"])
            for row in failing
        ],
        queued=queued["n"],
        oldest_queued_at=queued["oldest"],
        running=runs.filter(status=Run.Status.RUNNING).count(),
        alerts=list(alerts_open(workspaces=workspaces)[:ALERTS_SHOWN]),
        alerts_open=alerts_open(workspaces=workspaces).count(),
    )
