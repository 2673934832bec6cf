"""Steered input on the worker's side (the `steer` concurrency policy; docs/protocol.md, "Steering").

What belongs here: reading the messages recorded on a running run (`Run.input_events`) that the worker has
not handed to the runtime yet, and giving a run of its own to each message the run never took — the runner
did not read it before it ended, or the run ended before it could be sent. Both run in the worker's
database executor; `execution.RunExecution` sends `run_input` between them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from runners.lifecycle.services import run_build, run_dispatch_on_commit
from runners.models import Run
from runners.orchestrator.admission import merged_input
from transcripts.models import EventLog

logger = logging.getLogger(__name__)

QUEUED_STEER_UNREAD = "queued: the running run ended before it read this message"


@dataclass(frozen=True)
class SteeredInput:
    event_pk: int
    event_id: str
    input: dict[str, Any]


def steered_inputs_pending(*, run_pk: int, handled: frozenset[int]) -> list[SteeredInput]:
    """The messages recorded on the run, in order, but those in `handled`. Only events of the run's own
    workspace and conversation are read: anything else on the list is left alone."""
    run = Run.objects.filter(pk=run_pk).values("input_events", "workspace_id", "conversation_id").first()
    if run is None:
        return []
    wanted = [pk for pk in run["input_events"] or [] if isinstance(pk, int) and pk not in handled]
    if not wanted:
        return []
    events = EventLog.objects.filter(
        pk__in=wanted, workspace_id=run["workspace_id"], conversation_id=run["conversation_id"]
    ).in_bulk()
    return [
        SteeredInput(pk, events[pk].event_id, merged_input([events[pk]]).model_dump(mode="json", exclude_none=True))
        for pk in wanted
        if pk in events
    ]


def steered_inputs_requeue(*, run_pk: int, event_pks: list[int]) -> list[str]:
    """Give each of `event_pks`, which the run never took, a queued run of its own (in order, behind the
    conversation's active runs), and take them off the run's `input_events`, which then lists only what it
    was given. Returns the new runs' ids."""
    created: list[str] = []
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("binding").filter(pk=run_pk).first()
        if run is None:
            return created
        taken_back = set(event_pks)
        Run.objects.filter(pk=run_pk).update(input_events=[pk for pk in run.input_events or [] if pk not in taken_back])
        if run.binding is None:
            logger.warning("run %s: its binding is gone; %d steered message(s) get no run", run.run_id, len(event_pks))
            return created
        events = EventLog.objects.in_bulk(event_pks)
        for pk in event_pks:
            event = events.get(pk)
            if event is None:
                continue
            own = run_build(event=event, binding=run.binding, observer=run.is_observer)
            own.status_reason = QUEUED_STEER_UNREAD
            own.save()
            run_dispatch_on_commit(run_id=str(own.run_id))
            created.append(str(own.run_id))
    return created
