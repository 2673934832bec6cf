"""The alert evaluator: reads what the host already records, decides which conditions hold now, raises the
alerts that are new and resolves those that stopped — each with its completion-webhook message written in
the same transaction (`alert.raised`, `alert.resolved`), so a message goes out exactly when the row changed.

Where each condition is read:

- a bot's connection: the status the connector process (or OneBot's socket) keeps in the cache
  (`platforms.connectors`); a bot whose status is not `connected` or `connecting` — or that no process
  reports at all — is down;
- a bot's deliveries: its last `delivery_failures` `PlatformDelivery` rows all failed;
- a binding's failure rate: its last `binding_runs` ended runs (cancelled ones left out), counted only
  once it has that many, among the bindings that ended a run in the last day;
- the queue: the oldest `queued` run of the workspace has waited `queue_wait_seconds`;
- a model provider: the model calls (`ProxyCallAudit`, audited on the host's own proxy) that ended in
  a provider's failure (`runtime_error`, `rate_limited`, `deadline_exceeded`) within the window.

`alerts_evaluate` is run by Celery beat every minute (`platforms.alerts.tasks`). Two passes at once are
harmless: the partial unique constraint lets one raise, and the conditional update lets one resolve.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Min
from django.utils import timezone

from bindings.models import AgentBinding, Bot, Workspace
from langbot_sdk.protocol.actions import Action
from langbot_sdk.protocol.errors import ErrorCode
from platforms.alerts.models import Alert, AlertKind, AlertSettings
from platforms.connectors import connection_bots, connection_statuses
from platforms.models import PlatformDelivery
from platforms.webhooks.models import WebhookEventType
from platforms.webhooks.outbox import workspace_event_record
from resources.models import Model
from runners.models import ProxyCallAudit, Run

logger = logging.getLogger(__name__)

DEFAULTS = AlertSettings()
"""The thresholds of a workspace without its own row (the model's field defaults)."""

BINDINGS_LOOKBACK = timedelta(days=1)
_CONNECTION_UP = ("connected", "connecting")
_MODEL_ACTIONS = (Action.INVOKE_LLM.value, Action.INVOKE_LLM_STREAM.value, Action.INVOKE_RERANK.value)
_PROVIDER_FAILURES = (ErrorCode.RUNTIME_ERROR.value, ErrorCode.RATE_LIMITED.value, ErrorCode.DEADLINE_EXCEEDED.value)
_RUN_FAILED = (Run.Status.FAILED, Run.Status.TIMEOUT)


@dataclass
class Condition:
    details: dict[str, Any]
    binding_pk: int | None = None  # an endpoint of one binding gets the alerts of that binding only


@dataclass
class Outcome:
    raised: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)


def thresholds_of(workspace: Workspace) -> AlertSettings:
    found = AlertSettings.objects.filter(workspace=workspace).first()
    return found if found is not None else DEFAULTS


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


# --- the conditions ---------------------------------------------------------------------------------


def _bots_down(workspace: Workspace, statuses: dict[int, dict[str, Any]], bots: list[Bot]) -> dict[str, Condition]:
    down = {}
    for bot in bots:
        if bot.workspace_id != workspace.pk:
            continue
        status = statuses.get(bot.pk)
        state = str(status.get("state") or "") if status else ""
        if state not in _CONNECTION_UP:
            detail = str(status.get("detail") or "") if status else ""
            down[bot.bot_id] = Condition(
                {"bot_id": bot.bot_id, "platform": bot.platform, "state": state or "unknown", "detail": detail}
            )
        # `connecting` is a connection on its way: neither down nor proof that it is up.
    return down


def _bots_failing_deliveries(workspace: Workspace, limits: AlertSettings) -> dict[str, Condition]:
    failing = {}
    bot_pks = PlatformDelivery.objects.filter(workspace=workspace).values_list("bot_id", flat=True).distinct()
    bots = dict(Bot.objects.filter(pk__in=list(bot_pks)).values_list("pk", "bot_id"))
    for bot_pk, bot_id in bots.items():
        last = list(
            PlatformDelivery.objects.filter(bot_id=bot_pk)
            .order_by("-id")
            .values_list("status", "error")[: limits.delivery_failures]
        )
        if len(last) == limits.delivery_failures and all(s == PlatformDelivery.Status.FAILED for s, _ in last):
            failing[bot_id] = Condition(
                {"bot_id": bot_id, "failed": len(last), "threshold": limits.delivery_failures, "last_error": last[0][1]}
            )
    return failing


def _bindings_failing(
    workspace: Workspace, limits: AlertSettings, *, now: datetime, open_keys: set[str]
) -> dict[str, Condition]:
    ended = Run.objects.filter(workspace=workspace, status__in=Run.TERMINAL_STATUSES).exclude(
        status=Run.Status.CANCELLED
    )
    recent = set(
        ended.filter(finished_at__gte=now - BINDINGS_LOOKBACK).values_list("binding_key", flat=True).distinct()
    )
    failing = {}
    for key in sorted(recent | open_keys):
        last = list(
            ended.filter(binding_key=key)
            .order_by("-finished_at", "-id")
            .values_list("status", "binding_id")[: limits.binding_runs]
        )
        if len(last) < limits.binding_runs:
            continue
        failed = sum(1 for status, _ in last if status in _RUN_FAILED)
        rate = failed / len(last)
        if rate >= limits.binding_failure_rate:
            failing[key] = Condition(
                {
                    "binding_id": key,
                    "failed": failed,
                    "runs": len(last),
                    "rate": round(rate, 4),
                    "threshold": limits.binding_failure_rate,
                },
                binding_pk=last[0][1],
            )
    return failing


def _queue_waiting(workspace: Workspace, limits: AlertSettings, *, now: datetime) -> dict[str, Condition]:
    queued = Run.objects.filter(workspace=workspace, status=Run.Status.QUEUED).aggregate(oldest=Min("created_at"))
    oldest = queued["oldest"]
    if oldest is None or (now - oldest).total_seconds() < limits.queue_wait_seconds:
        return {}
    waited = int((now - oldest).total_seconds())
    return {
        "queue": Condition(
            {"oldest_queued_at": _iso(oldest), "waited_seconds": waited, "threshold": limits.queue_wait_seconds}
        )
    }


def _providers_failing(workspace: Workspace, limits: AlertSettings, *, now: datetime) -> dict[str, Condition]:
    since = now - timedelta(seconds=limits.provider_window_seconds)
    resources = ProxyCallAudit.objects.filter(
        workspace_id=workspace.pk, action__in=_MODEL_ACTIONS, outcome__in=_PROVIDER_FAILURES, created_at__gte=since
    ).values_list("resource", "outcome")
    per_model: Counter[str] = Counter()
    outcomes: dict[str, Counter[str]] = {}
    for resource, outcome in resources:
        model_id = resource.partition("model_id=")[2].split(" ", 1)[0] if resource.startswith("model_id=") else ""
        if model_id:
            per_model[model_id] += 1
            outcomes.setdefault(model_id, Counter())[outcome] += 1
    if not per_model:
        return {}
    providers = dict(
        Model.objects.filter(workspace=workspace, model_id__in=list(per_model)).values_list(
            "model_id", "provider__provider_id"
        )
    )
    errors: Counter[str] = Counter()
    by_outcome: dict[str, Counter[str]] = {}
    for model_id, count in per_model.items():
        provider = providers.get(model_id)
        if provider is not None:
            errors[provider] += count
            by_outcome.setdefault(provider, Counter()).update(outcomes[model_id])
    return {
        provider: Condition(
            {
                "provider_id": provider,
                "errors": count,
                "by_outcome": dict(by_outcome[provider]),
                "window_seconds": limits.provider_window_seconds,
                "threshold": limits.provider_errors,
            }
        )
        for provider, count in errors.items()
        if count >= limits.provider_errors
    }


def conditions_of(
    workspace: Workspace, *, now: datetime, statuses: dict[int, dict[str, Any]], held_bots: list[Bot]
) -> dict[tuple[str, str], Condition]:
    """Every (kind, subject) of the workspace whose condition holds now, with its figures."""
    limits = thresholds_of(workspace)
    if not limits.enabled:
        return {}
    open_bindings = set(
        Alert.objects.filter(
            workspace=workspace, kind=AlertKind.BINDING_FAILURES, state=Alert.State.RAISED
        ).values_list("subject", flat=True)
    )
    found: dict[tuple[str, str], Condition] = {}
    for kind, conditions in (
        (AlertKind.BOT_CONNECTION, _bots_down(workspace, statuses, held_bots)),
        (AlertKind.BOT_DELIVERIES, _bots_failing_deliveries(workspace, limits)),
        (AlertKind.BINDING_FAILURES, _bindings_failing(workspace, limits, now=now, open_keys=open_bindings)),
        (AlertKind.QUEUE_WAIT, _queue_waiting(workspace, limits, now=now)),
        (AlertKind.PROVIDER_ERRORS, _providers_failing(workspace, limits, now=now)),
    ):
        for subject, condition in conditions.items():
            found[(kind.value, subject)] = condition
    return found


# --- raising and resolving ----------------------------------------------------------------------------


def alert_payload(alert: Alert, *, event_type: str) -> dict[str, Any]:
    """The completion-webhook message of an alert's change (Standard Webhooks' `type`, `timestamp`, `data`)."""
    return {
        "type": event_type,
        "timestamp": _iso(alert.resolved_at if event_type == WebhookEventType.ALERT_RESOLVED else alert.raised_at),
        "data": alert_out(alert),
    }


def alert_out(alert: Alert) -> dict[str, Any]:
    """An alert as the REST API and the webhook messages show it."""
    return {
        "alert_id": str(alert.alert_id),
        "kind": alert.kind,
        "subject": alert.subject,
        "state": alert.state,
        "raised_at": _iso(alert.raised_at),
        "resolved_at": _iso(alert.resolved_at),
        "details": alert.details,
    }


def _binding_pk(workspace: Workspace, alert: Alert) -> int | None:
    if alert.kind != AlertKind.BINDING_FAILURES:
        return None
    return (
        AgentBinding.objects.filter(workspace=workspace, binding_id=alert.subject).values_list("pk", flat=True).first()
    )


def _raise(workspace: Workspace, kind: str, subject: str, condition: Condition, *, now: datetime) -> Alert | None:
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                workspace=workspace, kind=kind, subject=subject, raised_at=now, details=condition.details
            )
            event = WebhookEventType.ALERT_RAISED.value
            workspace_event_record(
                workspace_id=workspace.pk,
                event_type=event,
                message_id=f"msg_alert_{alert.alert_id.hex}_raised",
                payload=alert_payload(alert, event_type=event),
                binding_id=condition.binding_pk,
            )
    except IntegrityError:
        return None  # another evaluator raised it first: it is open, and was announced once, by that one
    logger.warning("alert raised: workspace=%s kind=%s subject=%s", workspace.slug, kind, subject)
    return alert


def _resolve(workspace: Workspace, alert: Alert, *, now: datetime) -> bool:
    with transaction.atomic():
        if not Alert.objects.filter(pk=alert.pk, state=Alert.State.RAISED).update(
            state=Alert.State.RESOLVED, resolved_at=now
        ):
            return False  # another evaluator resolved it
        alert.state, alert.resolved_at = Alert.State.RESOLVED, now
        event = WebhookEventType.ALERT_RESOLVED.value
        workspace_event_record(
            workspace_id=workspace.pk,
            event_type=event,
            message_id=f"msg_alert_{alert.alert_id.hex}_resolved",
            payload=alert_payload(alert, event_type=event),
            binding_id=_binding_pk(workspace, alert),
        )
    logger.info("alert resolved: workspace=%s kind=%s subject=%s", workspace.slug, alert.kind, alert.subject)
    return True


def workspace_evaluate(
    workspace: Workspace, *, now: datetime, statuses: dict[int, dict[str, Any]], held_bots: list[Bot]
) -> Outcome:
    outcome = Outcome()
    open_alerts = {(a.kind, a.subject): a for a in Alert.objects.filter(workspace=workspace, state=Alert.State.RAISED)}
    holding = conditions_of(workspace, now=now, statuses=statuses, held_bots=held_bots)
    for (kind, subject), condition in holding.items():
        if (kind, subject) not in open_alerts:
            raised = _raise(workspace, kind, subject, condition, now=now)
            if raised is not None:
                outcome.raised.append(raised)
    for key, alert in open_alerts.items():
        if key not in holding and _resolve(workspace, alert, now=now):
            outcome.resolved.append(alert)
    return outcome


def alerts_evaluate(*, now: datetime | None = None, workspaces: Iterable[Workspace] | None = None) -> Outcome:
    """One pass over every workspace (or these): raise what holds and is not open, resolve what is open and
    no longer holds."""
    now = now or timezone.now()
    held_bots = connection_bots()
    statuses = connection_statuses(held_bots)
    total = Outcome()
    for workspace in workspaces if workspaces is not None else Workspace.objects.order_by("pk"):
        try:
            outcome = workspace_evaluate(workspace, now=now, statuses=statuses, held_bots=held_bots)
        except Exception:
            # One workspace's bad row must not keep the others' alerts from being raised.
            logger.exception("alerts of workspace %s could not be evaluated", workspace.slug)
            continue
        total.raised += outcome.raised
        total.resolved += outcome.resolved
    return total
