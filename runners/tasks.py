"""Celery tasks of the runners app. Thin: ids in, a service or the orchestrator does the work.

`run_execute` is idempotent by construction — the orchestrator claims the run with a conditional
update, so a redelivered message for a claimed or finished run finds nothing to do.
"""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def run_execute(run_id: str) -> None:
    """Claim the run and hand it to this worker process's run loop; returns once it is admitted."""
    from runners.orchestrator.worker import run_admit

    run_admit(run_id=run_id)


@shared_task(ignore_result=True)
def runs_sweep() -> None:
    """Beat task: fail runs whose lease expired and re-send runs left queued too long; expire the platform
    actions whose approval came too late (their time ran out, or their run ended)."""
    from runners.hostapi.platform_actions import platform_actions_expire
    from runners.lifecycle.services import runs_sweep as sweep

    sweep()
    platform_actions_expire()


@shared_task(ignore_result=True)
def retention_sweep() -> None:
    """Beat task, daily: purge what the retention settings no longer keep (runners.lifecycle.retention)."""
    from runners.lifecycle.retention import retention_sweep as sweep

    sweep()
