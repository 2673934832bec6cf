"""The run-end port: what layers above `runners` (the completion webhooks, the retries) learn when runs end.

Every way a run ends — the worker's finish (completed, failed, timeout, cancelled), a failure before it
started, a queued run cancelled, a rejected run, a run whose lease the sweep found expired — calls
`runs_ended` inside the transaction that ends the runs, with their final status, reason, error, usage,
output and `finished_at` set. One rule says when an observer runs (`foundation.ports.Observers`):

- registered plainly, in that transaction, in a savepoint of its own: its rows (the webhook outbox, a
  retry's new run) commit with the run end or not at all, and its failure never undoes the run end;
- registered with `after_commit=True`, once the run end has committed: anything that talks to the
  outside, so nothing outside hears of a run end that rolled back.

Observers are registered at start-up (`AppConfig.ready`); `runners` never imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from foundation.ports import Observers
from runners.models import Run

RunEndObserver = Callable[[Sequence[Run]], None]

run_end_observers: Observers[Run] = Observers("run-end")


def run_end_observer_register(observer: RunEndObserver, *, after_commit: bool = False) -> None:
    """Add an observer (idempotent: registering the same function twice keeps one). `after_commit`: it
    talks to the outside, so it runs only once the run end has committed."""
    run_end_observers.register(observer, after_commit=after_commit)


def runs_ended(*, runs: Sequence[Run]) -> None:
    """Tell every observer that `runs` ended; call it inside the transaction that ended them."""
    run_end_observers.notify(runs)
