"""Celery task of the alerts: the evaluator, sent by beat every minute (`CELERY_BEAT_SCHEDULE`)."""

from __future__ import annotations

from celery import shared_task

from platforms.alerts.evaluator import alerts_evaluate as _evaluate


@shared_task(ignore_result=True)
def alerts_evaluate() -> None:
    """Beat task: raise the alerts whose condition holds, resolve those whose condition stopped."""
    _evaluate()
