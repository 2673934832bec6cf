"""The action-requested port: what layers above `runners` (the completion webhooks) learn when a runner's
platform action starts waiting for an operator's approval (`pending_approval`).

`platform_action_submit` calls `actions_requested` inside the transaction that records the request. The
same rule as the run-end port (`foundation.ports.Observers`): an observer registered plainly runs in that
transaction, in a savepoint of its own, so its rows (an outbox) commit or roll back with the request and
its failure never undoes it; one registered with `after_commit=True` talks to the outside and runs only
once the request has committed. Observers are registered at start-up (`AppConfig.ready`); `runners`
never imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from foundation.ports import Observers
from runners.models import PlatformActionRequest

ActionRequestedObserver = Callable[[Sequence[PlatformActionRequest]], None]

action_requested_observers: Observers[PlatformActionRequest] = Observers("action-requested")


def action_requested_observer_register(observer: ActionRequestedObserver, *, after_commit: bool = False) -> None:
    """Add an observer (idempotent: registering the same function twice keeps one). `after_commit`: it
    talks to the outside, so it runs only once the request has committed."""
    action_requested_observers.register(observer, after_commit=after_commit)


def actions_requested(*, requests: Sequence[PlatformActionRequest]) -> None:
    """Tell every observer that `requests` wait for approval; call it inside the transaction that records them."""
    action_requested_observers.notify(requests)
