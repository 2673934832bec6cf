"""The run-end port: what layers above `runners` (the completion webhooks) learn when runs end.

Every way a run ends calls `runs_ended` with the ended runs, their final status, reason, error, usage,
output and `finished_at` set: inside the transaction that ended them where there is one, so an observer's
rows (an outbox) commit or roll back with the run end. The one-statement run end of the worker
(`orchestrator.ledger`) commits on its own, so there the observers run right after it. Observers are
registered at start-up (`AppConfig.ready`); `runners` never imports them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django.db import transaction

from runners.models import Run

logger = logging.getLogger(__name__)

RunEndObserver = Callable[[Sequence[Run]], None]

_observers: list[RunEndObserver] = []


def run_end_observer_register(observer: RunEndObserver) -> None:
    """Add an observer (idempotent: registering the same function twice keeps one)."""
    if observer not in _observers:
        _observers.append(observer)


def runs_ended(*, runs: Sequence[Run]) -> None:
    """Tell every observer that `runs` ended. An observer that fails is logged and rolled back to its
    savepoint: it never undoes the run end it observes."""
    if not runs or not _observers:
        return
    for observer in _observers:
        try:
            with transaction.atomic():
                observer(runs)
        except Exception:
            logger.exception(
                "run-end observer %s failed for %d run(s)", getattr(observer, "__name__", observer), len(runs)
            )
