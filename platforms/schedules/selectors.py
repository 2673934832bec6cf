"""Reads of schedules, always within one workspace."""

from __future__ import annotations

from django.db.models import QuerySet

from bindings.models import Workspace
from platforms.schedules.models import Schedule


def schedule_list(*, workspace: Workspace) -> QuerySet[Schedule]:
    return Schedule.objects.filter(workspace=workspace).select_related("bot", "binding").order_by("schedule_id")


def schedule_get(*, workspace: Workspace, schedule_id: str) -> Schedule | None:
    return (
        Schedule.objects.filter(workspace=workspace, schedule_id=schedule_id)
        .select_related("workspace", "bot", "binding", "periodic_task__crontab")
        .first()
    )
