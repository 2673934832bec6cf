"""Recording run ends as webhook messages (the outbox), called through the run-end port of `runners`;
the platform actions that wait for approval (`action.requested`, through the action-requested port); and a
runner's request for a human (`handoff.requested`, through the handoff-requested port of `runners.takeover`);
and messages of a workspace rather than of a run (`workspace_event_record`: `alert.raised`, `alert.resolved`).

`runs_ended_record` runs in the transaction that ended the runs (see `runners.lifecycle.observers`): the
delivery rows commit with the run end or not at all, and the senders are woken only after the commit. It
must stay cheap — it is on every run's end — so a workspace without an enabled endpoint costs no query:
the set of such workspaces is read at most once per `SUBSCRIBED_CACHE_SECONDS` per process.

One gap remains, and `run_ends_reconcile` (a beat task, every minute) closes it: an endpoint made within
a process's cache time misses the runs that end meanwhile there. It also records any run end no observer
was told of (a run ended by hand in the database).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.db.models.functions import Greatest
from django.urls import reverse
from django.utils import timezone

from bindings.models import Bot
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEventType
from runners.models import PlatformActionRequest, Run
from runners.takeover.models import ConversationHold
from transcripts.models import EventLog

logger = logging.getLogger(__name__)

SUBSCRIBED_CACHE_SECONDS = 2.0
RECONCILE_SETTLE = timedelta(seconds=30)
RECONCILE_BATCH = 2000
RECONCILE_BUDGET_SECONDS = 30.0
SEND_BATCH = 50
# Sent by name: the tasks module stands on the sender, which this module does not need.
SEND_TASK = "platforms.webhooks.tasks.webhook_deliveries_send"

_EVENT_OF_STATUS = {
    Run.Status.COMPLETED: WebhookEventType.RUN_COMPLETED,
    Run.Status.FAILED: WebhookEventType.RUN_FAILED,
    Run.Status.TIMEOUT: WebhookEventType.RUN_FAILED,
    Run.Status.CANCELLED: WebhookEventType.RUN_CANCELLED,
}

_subscribed_lock = threading.Lock()
_subscribed: tuple[float, frozenset[int]] = (0.0, frozenset())


def subscribed_workspaces_forget() -> None:
    """Drop this process's cached set of workspaces with endpoints (an endpoint was made or changed)."""
    global _subscribed
    with _subscribed_lock:
        _subscribed = (0.0, frozenset())


def _subscribed_workspaces() -> frozenset[int]:
    global _subscribed
    read_at, workspaces = _subscribed
    if time.monotonic() - read_at < SUBSCRIBED_CACHE_SECONDS:
        return workspaces
    fresh = frozenset(WebhookEndpoint.objects.filter(enabled=True).values_list("workspace_id", flat=True).distinct())
    with _subscribed_lock:
        _subscribed = (time.monotonic(), fresh)
    return fresh


def event_type_of(run: Run) -> str | None:
    event = _EVENT_OF_STATUS.get(Run.Status(run.status)) if run.status in Run.Status.values else None
    return event.value if event is not None else None


def message_id_of(run: Run) -> str:
    """The `webhook-id` of a run's end: one per run, stable across attempts, redeliveries and processes."""
    return f"msg_{run.run_id.hex}"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def run_payload(run: Run, *, event_type: str, event_id: str | None, bot_id: str | None) -> dict[str, Any]:
    """The message body (Standard Webhooks' `type`, `timestamp`, `data`) for a run's end."""
    return {
        "type": event_type,
        "timestamp": _iso(run.finished_at or timezone.now()),
        "data": {
            "run_id": str(run.run_id),
            "status": run.status,
            "status_reason": run.status_reason,
            "error": run.error,
            "usage": run.usage,
            "output": run.output,
            "binding_id": run.binding_key,
            "runner_id": run.runner_id,
            "event_id": event_id,
            "bot_id": bot_id,
            "conversation_id": run.conversation_id or None,
            "thread_id": run.thread_id or None,
            "created_at": _iso(run.created_at),
            "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at),
        },
    }


def _matches(endpoint: WebhookEndpoint, run: Run, event_type: str) -> bool:
    if event_type not in endpoint.event_types:
        return False
    return endpoint.binding_id is None or endpoint.binding_id == run.binding_id


def _wanted(runs: Sequence[Run], *, workspaces: frozenset[int] | None) -> list[tuple[Run, str, WebhookEndpoint]]:
    """(run, event type, endpoint) for every enabled endpoint subscribed to these run ends that existed
    when the run ended."""
    ended: list[tuple[Run, str]] = []
    for run in runs:
        event = event_type_of(run) if workspaces is None or run.workspace_id in workspaces else None
        if event is not None:
            ended.append((run, event))
    if not ended:
        return []
    endpoints = list(
        WebhookEndpoint.objects.filter(workspace_id__in={run.workspace_id for run, _ in ended}, enabled=True).only(
            "pk", "workspace_id", "binding_id", "event_types", "created_at"
        )
    )
    return [
        (run, event, endpoint)
        for run, event in ended
        for endpoint in endpoints
        if endpoint.workspace_id == run.workspace_id
        and _matches(endpoint, run, event)
        and (run.finished_at is None or run.finished_at >= endpoint.created_at)
    ]


def _deliveries_write(wanted: list[tuple[Run, str, WebhookEndpoint]]) -> list[WebhookDelivery]:
    event_ids = dict(
        EventLog.objects.filter(pk__in={run.event_id for run, _, _ in wanted}).values_list("pk", "event_id")
    )
    bot_pks = {run.bot_id for run, _, _ in wanted if run.bot_id is not None}
    bot_ids = dict(Bot.objects.filter(pk__in=bot_pks).values_list("pk", "bot_id")) if bot_pks else {}
    now = timezone.now()
    rows = [
        WebhookDelivery(
            workspace_id=run.workspace_id,
            endpoint_id=endpoint.pk,
            event_id=message_id_of(run),
            event_type=event,
            run_id=run.run_id,
            payload=run_payload(
                run,
                event_type=event,
                event_id=event_ids.get(run.event_id),
                bot_id=bot_ids.get(run.bot_id) if run.bot_id is not None else None,
            ),
            next_attempt_at=now,
        )
        for run, event, endpoint in wanted
    ]
    WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    deliveries_send_on_commit(delivery_ids=[str(row.delivery_id) for row in rows])
    return rows


def deliveries_record(*, runs: Sequence[Run]) -> list[WebhookDelivery]:
    """Write the pending deliveries of these run ends for every endpoint subscribed to them, inside the
    caller's transaction, and wake a sender once it commits. A run end recorded twice is recorded once
    (unique endpoint + message id)."""
    wanted = _wanted(runs, workspaces=_subscribed_workspaces())
    return _deliveries_write(wanted) if wanted else []


def runs_mark() -> int:
    """The newest run's primary key: a new endpoint's reconciliation starts after it (no old runs)."""
    return int(Run.objects.aggregate(newest=Max("pk"))["newest"] or 0)


def run_ends_reconcile(*, now: datetime | None = None) -> int:
    """Record the run ends no observer reported — an endpoint made while a process's cache did not know it
    yet, a run ended with no observer told — and return how many.

    Each endpoint remembers the run (by primary key) up to which every run of its workspace has ended and
    been checked. A pass reads the runs after the lowest such mark of each workspace, `RECONCILE_BATCH` at
    a time (only the columns the check needs), until it is caught up or has spent `RECONCILE_BUDGET`, and
    stops at the first run still active or ended less than `RECONCILE_SETTLE` ago (its observer may still
    be at work): a long run delays the check of later ones, never skips them.
    """
    now = now or timezone.now()
    deadline = time.monotonic() + RECONCILE_BUDGET_SECONDS
    recorded = 0
    for workspace_id in list(WebhookEndpoint.objects.values_list("workspace_id", flat=True).distinct()):
        endpoints = list(WebhookEndpoint.objects.filter(workspace_id=workspace_id))
        mark = min(e.runs_checked_through for e in endpoints)
        while time.monotonic() < deadline:
            checked, complete = _settled_runs(workspace_id=workspace_id, after=mark, settled=now - RECONCILE_SETTLE)
            if checked:
                recorded += _missing_record(endpoints, checked)
                mark = checked[-1].pk
            if not complete:
                break
    return recorded


def _settled_runs(*, workspace_id: int, after: int, settled: datetime) -> tuple[list[Run], bool]:
    """The runs after `after` up to the first one not yet ended and settled; and whether the whole batch was."""
    fields = ("pk", "run_id", "workspace_id", "binding_id", "status", "finished_at")
    runs = Run.objects.filter(workspace_id=workspace_id, pk__gt=after).order_by("pk").only(*fields)
    batch = list(runs[:RECONCILE_BATCH])
    checked: list[Run] = []
    for run in batch:
        if run.status not in Run.TERMINAL_STATUSES or run.finished_at is None or run.finished_at > settled:
            return checked, False
        checked.append(run)
    return checked, len(batch) == RECONCILE_BATCH


def _missing_record(endpoints: list[WebhookEndpoint], checked: list[Run]) -> int:
    wanted = _wanted(checked, workspaces=None)
    existing = set(
        WebhookDelivery.objects.filter(
            endpoint__in=endpoints, run_id__in=[r.run_id for r, _, _ in wanted], redelivery_of__isnull=True
        ).values_list("endpoint_id", "run_id")
    ) if wanted else set()  # fmt: skip
    missing = [(run, event, e) for run, event, e in wanted if (e.pk, run.run_id) not in existing]
    with transaction.atomic():
        if missing:
            # The whole rows (output, usage, error) only for the runs whose message is missing.
            full = Run.objects.defer("authorization").in_bulk([run.pk for run, _, _ in missing])
            _deliveries_write([(full[run.pk], event, e) for run, event, e in missing])
        WebhookEndpoint.objects.filter(pk__in=[e.pk for e in endpoints]).update(
            runs_checked_through=Greatest("runs_checked_through", checked[-1].pk)
        )
    if missing:
        logger.warning("recorded %d webhook message(s) of run ends no observer reported", len(missing))
    return len(missing)


def webhook_queue() -> str | None:
    """The Celery queue of the webhook tasks (`LANGBOT_WEBHOOK_QUEUE`); None for the default queue."""
    return getattr(settings, "LANGBOT_WEBHOOK_QUEUE", "") or None


def deliveries_send(*, delivery_ids: list[str]) -> None:
    """Wake senders for these deliveries now, in batches, on the webhook queue. A lost message is not
    fatal: `deliveries_due_send` sends what is due."""
    queue = webhook_queue()
    for start in range(0, len(delivery_ids), SEND_BATCH):
        try:
            current_app.send_task(SEND_TASK, args=[delivery_ids[start : start + SEND_BATCH]], queue=queue)
        except Exception:
            logger.warning("could not send webhook deliveries to the broker; the due sweep will", exc_info=True)


def deliveries_send_on_commit(*, delivery_ids: list[str]) -> None:
    """Wake senders for these deliveries after the transaction commits."""
    transaction.on_commit(lambda: deliveries_send(delivery_ids=delivery_ids))


def runs_ended_record(runs: Sequence[Run]) -> None:
    """The run-end observer that `WebhooksConfig.ready` registers."""
    deliveries_record(runs=runs)


# --- action.requested -----------------------------------------------------------------------------


def action_message_id_of(request: PlatformActionRequest) -> str:
    """The `webhook-id` of a request's `action.requested` message: one per request."""
    return f"msg_action_{request.pk}"


def action_requested_payload(request: PlatformActionRequest, *, run: Run) -> dict[str, Any]:
    """What a receiver needs to decide a pending platform action and where to say so: the action, its
    target, until when it can be approved, and the REST paths (an API key of the workspace decides).
    The action's payload is left out (it may be large, or carry a message's text): `detail` shows it."""
    key = str(request.pk)
    return {
        "type": WebhookEventType.ACTION_REQUESTED.value,
        "timestamp": _iso(request.created_at),
        "data": {
            "request_id": request.pk,
            "run_id": str(run.run_id),
            "action": request.action,
            "target": request.target,
            "binding_id": request.binding_key,
            "runner_id": request.runner_id,
            "surface": request.surface,
            "origin": request.origin,
            "conversation_id": run.conversation_id or None,
            "may_outlive_run": request.may_outlive_run,
            "expires_at": _iso(request.expires_at),
            "created_at": _iso(request.created_at),
            "detail": {"method": "GET", "path": reverse("action-detail", kwargs={"action_id": key})},
            "approve": {"method": "POST", "path": reverse("action-approve", kwargs={"action_id": key})},
            "reject": {"method": "POST", "path": reverse("action-reject", kwargs={"action_id": key})},
        },
    }


def actions_requested_record(requests: Sequence[PlatformActionRequest]) -> None:
    """The action-requested observer that `WebhooksConfig.ready` registers."""
    action_deliveries_record(requests=requests)


def action_deliveries_record(*, requests: Sequence[PlatformActionRequest]) -> list[WebhookDelivery]:
    """In the transaction that records the pending requests, write an `action.requested` delivery for
    every enabled endpoint of their workspace subscribed to it (for an endpoint of one binding: of that
    binding's runs), and wake a sender once it commits. Costs no query for a workspace without an
    enabled endpoint."""
    event = WebhookEventType.ACTION_REQUESTED.value
    subscribed = _subscribed_workspaces()
    pending = [r for r in requests if r.workspace_id in subscribed]
    if not pending:
        return []
    endpoints = [
        endpoint
        for endpoint in WebhookEndpoint.objects.filter(
            workspace_id__in={r.workspace_id for r in pending}, enabled=True
        ).only("pk", "workspace_id", "binding_id", "event_types")
        if event in endpoint.event_types
    ]
    now = timezone.now()
    rows: list[WebhookDelivery] = []
    for request in pending:
        run = request.run
        payload = None
        for endpoint in endpoints:
            if endpoint.workspace_id != request.workspace_id:
                continue
            if endpoint.binding_id is not None and endpoint.binding_id != run.binding_id:
                continue
            payload = payload or action_requested_payload(request, run=run)
            rows.append(
                WebhookDelivery(
                    workspace_id=request.workspace_id,
                    endpoint_id=endpoint.pk,
                    event_id=action_message_id_of(request),
                    event_type=event,
                    run_id=run.run_id,
                    payload=payload,
                    next_attempt_at=now,
                )
            )
    if rows:
        WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
        deliveries_send_on_commit(delivery_ids=[str(row.delivery_id) for row in rows])
    return rows


# --- handoff.requested ----------------------------------------------------------------------------


def handoff_message_id_of(hold: ConversationHold) -> str:
    """The `webhook-id` of a handoff request's message: one per request."""
    return f"msg_handoff_{hold.pk}"


def handoff_requested_payload(hold: ConversationHold, *, run: Run | None) -> dict[str, Any]:
    """Where a human is wanted, why, and how to take the conversation over (REST, with a key of the workspace)."""
    conversation = hold.conversation_id
    return {
        "type": WebhookEventType.HANDOFF_REQUESTED.value,
        "timestamp": _iso(hold.requested_at),
        "data": {
            "conversation_id": conversation,
            "reason": hold.reason,
            "run_id": str(hold.requested_by_run) if hold.requested_by_run else None,
            "binding_id": run.binding_key if run is not None else None,
            "runner_id": run.runner_id if run is not None else None,
            "bot_id": hold.bot.bot_id if hold.bot is not None else None,
            "requested_at": _iso(hold.requested_at),
            "takeover": {
                "method": "POST",
                "path": reverse("conversation-takeover", kwargs={"conversation_id": conversation}),
            },
        },
    }


def handoffs_requested_record(holds: Sequence[ConversationHold]) -> None:
    """The handoff-requested observer that `WebhooksConfig.ready` registers."""
    handoff_deliveries_record(holds=holds)


def handoff_deliveries_record(*, holds: Sequence[ConversationHold]) -> list[WebhookDelivery]:
    """In the transaction that records the handoff requests, write a `handoff.requested` delivery for every
    enabled endpoint of their workspace subscribed to it (an endpoint of one binding: when that binding's
    run asked), and wake a sender once it commits. No query for a workspace without an enabled endpoint."""
    event = WebhookEventType.HANDOFF_REQUESTED.value
    subscribed = _subscribed_workspaces()
    pending = [h for h in holds if h.workspace_id in subscribed]
    if not pending:
        return []
    endpoints = [
        endpoint
        for endpoint in WebhookEndpoint.objects.filter(
            workspace_id__in={h.workspace_id for h in pending}, enabled=True
        ).only("pk", "workspace_id", "binding_id", "event_types")
        if event in endpoint.event_types
    ]
    if not endpoints:
        return []
    runs = {
        run.run_id: run
        for run in Run.objects.filter(run_id__in=[h.requested_by_run for h in pending if h.requested_by_run]).only(
            "run_id", "binding_id", "binding_key", "runner_id"
        )
    }
    now = timezone.now()
    rows: list[WebhookDelivery] = []
    for hold in pending:
        run = runs.get(hold.requested_by_run) if hold.requested_by_run else None
        payload = None
        for endpoint in endpoints:
            if endpoint.workspace_id != hold.workspace_id:
                continue
            if endpoint.binding_id is not None and (run is None or endpoint.binding_id != run.binding_id):
                continue
            payload = payload or handoff_requested_payload(hold, run=run)
            rows.append(
                WebhookDelivery(
                    workspace_id=hold.workspace_id,
                    endpoint_id=endpoint.pk,
                    event_id=handoff_message_id_of(hold),
                    event_type=event,
                    run_id=run.run_id if run is not None else None,
                    payload=payload,
                    next_attempt_at=now,
                )
            )
    if rows:
        WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
        deliveries_send_on_commit(delivery_ids=[str(row.delivery_id) for row in rows])
    return rows


# --- workspace events (alert.raised, alert.resolved) ------------------------------------------------


def workspace_event_record(
    *, workspace_id: int, event_type: str, message_id: str, payload: dict[str, Any], binding_id: int | None = None
) -> list[WebhookDelivery]:
    """In the caller's transaction, write a delivery of one message of the workspace (not of a run) for every
    enabled endpoint of it subscribed to `event_type` — an endpoint of one binding only when the message is
    about that binding (`binding_id`) — and wake a sender once it commits. Recording the same `message_id`
    twice records it once (unique endpoint + message id)."""
    endpoints = [
        endpoint
        for endpoint in WebhookEndpoint.objects.filter(workspace_id=workspace_id, enabled=True).only(
            "pk", "binding_id", "event_types"
        )
        if event_type in endpoint.event_types and endpoint.binding_id in (None, binding_id)
    ]
    now = timezone.now()
    rows = [
        WebhookDelivery(
            workspace_id=workspace_id,
            endpoint_id=endpoint.pk,
            event_id=message_id,
            event_type=event_type,
            payload=payload,
            next_attempt_at=now,
        )
        for endpoint in endpoints
    ]
    if rows:
        WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
        deliveries_send_on_commit(delivery_ids=[str(row.delivery_id) for row in rows])
    return rows
