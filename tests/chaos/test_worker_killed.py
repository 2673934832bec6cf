"""Workers SIGKILLed one after another while runs keep coming (CHAOS_LOOPS times, 3 by default; the issue's
×30 is `make chaos CHAOS_LOOPS=30`): with the binding's automatic retry on, every event ends answered exactly
once — no run left queued or running, no event with two replies. This test process plays beat's part and
runs the sweeper (leases of 3 s, runs left queued re-sent after 2 s)."""

from __future__ import annotations

import os
import time

import pytest
from django.db.models import Count

from runners.lifecycle.services import runs_sweep
from runners.models import Run
from tests.chaos.faults import stuck_and_duplicated, wait_for
from tests.chaos.report import ChaosRow, record
from tests.processes import post_message
from transcripts.models import TranscriptItem

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LOOPS = int(os.environ.get("CHAOS_LOOPS") or 3)
RUNS_PER_LOOP = 4


def _answered(event_ids: list[int]) -> bool:
    runs_sweep()
    done = Run.objects.filter(event_id__in=event_ids, status=Run.Status.COMPLETED).values("event_id").distinct()
    return done.count() == len(event_ids)


def test_worker_killed_in_a_loop_under_load(private_worker, qa_binding, settings) -> None:
    settings.LANGBOT_QUEUED_STALE_SECONDS = 2
    binding = qa_binding(
        concurrency_policy="parallel", delivery_policy={"retry": {"max_attempts": 5, "backoff_seconds": 0.2}}
    )
    first_runs: list[Run] = []
    worker = private_worker()
    try:
        for loop in range(LOOPS):
            first_runs += [
                post_message(binding, "qa:slow:2 x", conversation_id=f"k{loop}-{i}") for i in range(RUNS_PER_LOOP)
            ]
            wait_for(lambda: Run.objects.filter(status=Run.Status.RUNNING).exists(), timeout=30, what="a run running")
            time.sleep(0.5)
            worker.kill()
            killed_at = time.monotonic()
            runs_sweep()
            worker = private_worker()

        events = [run.event_id for run in first_runs]
        wait_for(lambda: _answered(events), timeout=60 + 10 * LOOPS, what="every event answered", every=0.5)
        recovered = time.monotonic() - killed_at
    finally:
        worker.stop()

    all_runs = list(Run.objects.filter(event_id__in=events))
    retried = sum(1 for run in all_runs if run.status == Run.Status.FAILED)
    stuck, duplicated = stuck_and_duplicated(str(run.run_id) for run in all_runs)
    replies_per_event = (
        TranscriptItem.objects.filter(event_id__in=events, role=TranscriptItem.Role.ASSISTANT)
        .values("event_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    completed_twice = (
        Run.objects.filter(event_id__in=events, status=Run.Status.COMPLETED)
        .values("event_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    duplicated += replies_per_event + completed_twice
    record(ChaosRow(f"worker killed x{LOOPS} under load", len(first_runs),
                    f"{len(events)}/{len(events)} answered, {retried} lost run(s) retried", recovered, stuck,
                    duplicated))  # fmt: skip
    assert (stuck, duplicated) == (0, 0)
