"""Recording run ends as webhook messages (the outbox), called through the run-end port of `runners`.

`runs_ended_record` runs in the transaction that ended the runs (see `runners.lifecycle.observers`): the
delivery rows commit with the run end or not at all, and the senders are woken only after the commit. It
must stay cheap — it is on every run's end — so a workspace without an enabled endpoint costs no query:
the set of such workspaces is read at most once per `SUBSCRIBED_CACHE_SECONDS` per process. An endpoint
created within that time may miss the runs that end meanwhile; that is the price of not querying per run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from celery import current_app
from django.db import transaction
from django.utils import timezone

from bindings.models import Bot
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEventType
from runners.models import Run
from transcripts.models import EventLog

logger = logging.getLogger(__name__)

SUBSCRIBED_CACHE_SECONDS = 2.0
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


def deliveries_record(*, runs: Sequence[Run]) -> list[WebhookDelivery]:
    """Write the pending deliveries of these run ends for every endpoint subscribed to them, inside the
    caller's transaction, and wake a sender once it commits. A run end recorded twice is recorded once
    (unique endpoint + message id)."""
    subscribed = _subscribed_workspaces()
    ended: list[tuple[Run, str]] = []
    for run in runs:
        event = event_type_of(run) if run.workspace_id in subscribed else None
        if event is not None:
            ended.append((run, event))
    if not ended:
        return []
    endpoints = list(
        WebhookEndpoint.objects.filter(workspace_id__in={run.workspace_id for run, _ in ended}, enabled=True).only(
            "pk", "workspace_id", "binding_id", "event_types"
        )
    )
    wanted = [(run, event, e) for run, event in ended for e in endpoints if e.workspace_id == run.workspace_id]
    wanted = [(run, event, e) for run, event, e in wanted if _matches(e, run, event)]
    if not wanted:
        return []
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
    keys = [row.delivery_id for row in rows]
    deliveries_send_on_commit(delivery_ids=[str(k) for k in keys])
    return rows


def deliveries_send_on_commit(*, delivery_ids: list[str]) -> None:
    """Wake senders for these deliveries after the transaction commits (in batches). A lost message is
    not fatal: `deliveries_due_send` sends what is due."""

    def send() -> None:
        for start in range(0, len(delivery_ids), SEND_BATCH):
            try:
                current_app.send_task(SEND_TASK, args=[delivery_ids[start : start + SEND_BATCH]])
            except Exception:
                logger.warning("could not send webhook deliveries to the broker; the due sweep will", exc_info=True)

    transaction.on_commit(send)


def runs_ended_record(runs: Sequence[Run]) -> None:
    """The run-end observer that `WebhooksConfig.ready` registers."""
    deliveries_record(runs=runs)
