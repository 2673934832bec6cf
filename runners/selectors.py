"""Reads for runs and their persisted result events.

Run lists and run events page by cursor (run id / seq), never OFFSET; every run read is scoped to a
workspace, so another workspace's run is simply not found.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from bindings.models import Workspace
from runners.models import Run, RunEvent
from transcripts.models import EventLog

# --- runs --------------------------------------------------------------------------------------------

RUN_PAGE_LIMIT_MAX = 100


def input_event_ids(runs: list[Run]) -> dict[int, str]:
    """Event pk → event id of every event the runs list in `input_events` (messages merged or steered
    into them), in one query; only events of each run's own workspace."""
    pks = {pk for run in runs for pk in run.input_events or [] if isinstance(pk, int)}
    if not pks:
        return {}
    workspaces = {run.workspace_id for run in runs}
    rows = EventLog.objects.filter(pk__in=pks, workspace_id__in=workspaces).values_list("pk", "event_id")
    return dict(rows)


def runs_citations(runs: list[Run]) -> dict[int, list[dict[str, Any]]]:
    """Run pk → the citations its runner gave with its reply (`run.completed`'s `metadata.citations`: the
    knowledge chunks or documents the answer drew on, in the runner's own shape), in one query; a run
    without any (or whose events the retention sweep removed) maps to []."""
    found: dict[int, list[dict[str, Any]]] = {run.pk: [] for run in runs}
    if not found:
        return found
    rows = RunEvent.objects.filter(run_id__in=list(found), type="run.completed").values_list("run_id", "data")
    for run_pk, data in rows:
        metadata = data.get("metadata") if isinstance(data, dict) else None
        citations = metadata.get("citations") if isinstance(metadata, dict) else None
        if isinstance(citations, list):
            found[run_pk] = [c for c in citations if isinstance(c, dict)]
    return found


@dataclass(frozen=True)
class RunPage:
    items: list[Run]
    # Pass as `before` for the next (older) page; None on the last page.
    next_before: int | None


@dataclass(frozen=True)
class RunEventPage:
    items: list[RunEvent]
    has_more: bool


def run_get(*, workspace: Workspace, run_id: str) -> Run | None:
    """The workspace's run, or None — also for a malformed id and for another workspace's run."""
    try:
        public_id = uuid.UUID(str(run_id))
    except ValueError:
        return None
    return Run.objects.filter(workspace=workspace, run_id=public_id).select_related("event").first()


def run_page(
    *,
    workspace: Workspace,
    conversation_id: str | None = None,
    status: str | None = None,
    binding_id: str | None = None,
    event: EventLog | None = None,
    before: int | None = None,
    limit: int = 50,
) -> RunPage:
    """The workspace's runs, newest first, by id cursor (no OFFSET)."""
    limit = max(1, min(limit, RUN_PAGE_LIMIT_MAX))
    queryset = Run.objects.filter(workspace=workspace)
    if conversation_id:
        queryset = queryset.filter(conversation_id=conversation_id)
    if status:
        queryset = queryset.filter(status=status)
    if binding_id:
        queryset = queryset.filter(binding_key=binding_id)
    if event is not None:
        queryset = queryset.filter(event=event)
    if before is not None:
        queryset = queryset.filter(id__lt=before)
    rows = list(queryset.select_related("event").order_by("-id")[: limit + 1])
    items = rows[:limit]
    return RunPage(items=items, next_before=items[-1].id if len(rows) > limit else None)


def runs_of_event(*, event: EventLog) -> list[Run]:
    return list(Run.objects.filter(event=event).select_related("event").order_by("id"))


def run_events_page(*, run: Run, after_seq: int = 0, limit: int = 100) -> RunEventPage:
    """Persisted results of a run after `after_seq`, oldest first."""
    limit = max(1, min(limit, RUN_PAGE_LIMIT_MAX))
    rows = list(RunEvent.objects.filter(run=run, seq__gt=after_seq).order_by("seq")[: limit + 1])
    return RunEventPage(items=rows[:limit], has_more=len(rows) > limit)
