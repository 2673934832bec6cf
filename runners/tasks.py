"""Celery tasks of the runners app. Thin: ids in, a service or the orchestrator does the work.

`run_execute` is idempotent by construction — the orchestrator claims each run with a conditional
update, so a redelivered message for a claimed or finished run finds nothing to do.
"""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def run_execute(run_ids: str | list[str]) -> None:
    """Claim the runs and hand them to this worker process's run loop; returns once each is admitted (or
    found not claimable). One id is a message of one run (`runners.lifecycle.dispatch` sends those, and
    messages queued before batches existed are those); a list is runs that were dispatched together.
    Acknowledged late: a worker lost in the middle of a list leaves the message to be delivered again,
    and its runs already claimed are then skipped."""
    from foundation.tracing import task_carry
    from runners.orchestrator.worker import runs_admit

    with task_carry(run_execute.request):  # the runs' dispatch spans the message carried, when traced
        runs_admit(run_ids=run_ids if isinstance(run_ids, list) else [run_ids])


@shared_task(ignore_result=True)
def runs_sweep() -> None:
    """Beat task: fail runs whose lease expired and re-send runs left queued too long; expire the platform
    actions whose approval came too late (their time ran out, or their run ended)."""
    from runners.actions.platform_actions import platform_actions_expire
    from runners.lifecycle.services import runs_sweep as sweep

    sweep()
    platform_actions_expire()


@shared_task(ignore_result=True)
def retention_sweep() -> None:
    """Beat task, daily: purge what the retention settings no longer keep (runners.lifecycle.retention)."""
    from runners.lifecycle.retention import retention_sweep as sweep

    sweep()
