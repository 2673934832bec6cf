"""Waking a worker for a queued run: the one place the web side sends work to Celery.

The task is sent by name, so this leaf module (and everything that creates or re-sends runs) does not
import the worker's code: `runners.tasks` stands on the orchestrator, which stands on the lifecycle.
"""

from __future__ import annotations

import logging

from celery import current_app

logger = logging.getLogger(__name__)

RUN_EXECUTE_TASK = "runners.tasks.run_execute"


def run_dispatch(*, run_id: str) -> None:
    """Wake a worker for a queued run. A lost message is not fatal: `runs_sweep` re-sends stale runs."""
    try:
        current_app.send_task(RUN_EXECUTE_TASK, args=[run_id])
    except Exception:
        logger.warning("could not send run %s to the broker; the sweeper will re-send it", run_id, exc_info=True)
