"""Celery tasks of the completion webhooks. Thin: ids in, `delivery` does the work; running one twice is
harmless (an attempt starts with a conditional claim)."""

from __future__ import annotations

from celery import shared_task

from platforms.webhooks.delivery import deliveries_attempt, deliveries_due
from platforms.webhooks.outbox import deliveries_send, run_ends_reconcile


@shared_task(acks_late=True, ignore_result=True)
def webhook_deliveries_send(delivery_ids: list[str]) -> None:
    """Attempt these deliveries (those still due)."""
    deliveries_attempt(delivery_ids=delivery_ids)


@shared_task(ignore_result=True)
def webhook_deliveries_due_send() -> None:
    """Beat task: send the deliveries whose retry is due (and any whose first message to a sender was lost)."""
    deliveries_send(delivery_ids=deliveries_due())


@shared_task(ignore_result=True)
def webhook_run_ends_reconcile() -> None:
    """Beat task: record the run ends no observer reported (a worker died between run end and record)."""
    run_ends_reconcile()
