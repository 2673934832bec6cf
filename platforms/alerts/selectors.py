"""Reads of the alerts: a workspace's (REST), the open ones of the workspaces a person sees (the dashboard)."""

from __future__ import annotations

from django.db.models import QuerySet

from bindings.models import Workspace
from platforms.alerts.models import Alert


def alert_list(*, workspace: Workspace, state: str | None = None, before: int | None = None) -> QuerySet[Alert]:
    """The workspace's alerts, newest first (by id, the page cursor); only those in `state` when given."""
    alerts = Alert.objects.filter(workspace=workspace).order_by("-id")
    if state is not None:
        alerts = alerts.filter(state=state)
    if before is not None:
        alerts = alerts.filter(pk__lt=before)
    return alerts


def alerts_open(*, workspaces: QuerySet[Workspace] | None) -> QuerySet[Alert]:
    """The open alerts of these workspaces (None: every workspace), oldest first: the longest-standing on top."""
    alerts = Alert.objects.filter(state=Alert.State.RAISED).select_related("workspace").order_by("raised_at", "id")
    return alerts if workspaces is None else alerts.filter(workspace__in=workspaces)
