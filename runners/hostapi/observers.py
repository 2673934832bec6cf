"""The action-requested port: what layers above `runners` (the completion webhooks) learn when a runner's
platform action starts waiting for an operator's approval (`pending_approval`).

`platform_action_submit` calls `actions_requested` inside the transaction that records the request, so an
observer's rows (an outbox) commit or roll back with it. Observers are registered at start-up
(`AppConfig.ready`); `runners` never imports them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django.db import transaction

from runners.models import PlatformActionRequest

logger = logging.getLogger(__name__)

ActionRequestedObserver = Callable[[Sequence[PlatformActionRequest]], None]

_observers: list[ActionRequestedObserver] = []


def action_requested_observer_register(observer: ActionRequestedObserver) -> None:
    """Add an observer (idempotent: registering the same function twice keeps one)."""
    if observer not in _observers:
        _observers.append(observer)


def actions_requested(*, requests: Sequence[PlatformActionRequest]) -> None:
    """Tell every observer that `requests` wait for approval. An observer that fails is logged and rolled
    back to its savepoint: it never undoes the request it observes."""
    if not requests or not _observers:
        return
    for observer in _observers:
        try:
            with transaction.atomic():
                observer(requests)
        except Exception:
            logger.exception(
                "action-requested observer %s failed for %d request(s)",
                getattr(observer, "__name__", observer),
                len(requests),
            )
