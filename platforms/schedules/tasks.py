"""The task beat sends at every tick of a schedule (its `PeriodicTask` names it, with the schedule's key)."""

from __future__ import annotations

from celery import shared_task

from platforms.schedules.services import FIRE_TASK
from platforms.schedules.services import schedule_fire as schedule_fire_service


@shared_task(name=FIRE_TASK, ignore_result=True)
def schedule_fire(schedule_pk: int) -> None:
    # Safe to run twice (beat re-sends after a restart, the broker redelivers): a tick posts once.
    schedule_fire_service(schedule_pk=schedule_pk)
