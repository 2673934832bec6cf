"""Ports: how a lower app tells the apps above it what happened, or asks them to act, without importing them.

Two shapes, both filled at start-up from an `AppConfig.ready` of the app above:

- `Observers[T]`: any number of functions told about a batch of `T` (runs that ended, platform actions
  that wait for approval). An observer is one of two kinds, and the kind says when it runs:
  *in the transaction* (the default) — its rows must commit or roll back with what it observes, like an
  outbox; it runs inside the caller's transaction, in a savepoint of its own, so its failure is logged and
  undoes only its own writes — or *after commit* — it talks to the outside (a broker, a socket, another
  service) and must never act on something that may still roll back; it runs once the caller's
  transaction commits (at once when there is none), and not at all when it rolls back.
- `Port[T]`: one implementation of an interface (the platforms' delivery), or none.

Nothing app-specific belongs here: the apps own their ports' types and names.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from django.db import transaction

logger = logging.getLogger(__name__)

T = TypeVar("T")

Observer = Callable[[Sequence[T]], None]


class Observers(Generic[T]):
    """The observers of one kind of happening (`what`, for the logs)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._in_transaction: list[Observer[T]] = []
        self._after_commit: list[Observer[T]] = []

    def register(self, observer: Observer[T], *, after_commit: bool = False) -> None:
        """Add an observer of its kind (idempotent: registering the same function twice keeps one)."""
        kind = self._after_commit if after_commit else self._in_transaction
        if observer not in kind:
            kind.append(observer)

    def unregister(self, observer: Observer[T]) -> None:
        """Remove an observer of either kind (nothing happens if it was not registered)."""
        for kind in (self._in_transaction, self._after_commit):
            if observer in kind:
                kind.remove(observer)

    def notify(self, items: Sequence[T]) -> None:
        """Tell every observer about `items`: the in-transaction ones now, each in its own savepoint; the
        after-commit ones once the caller's transaction commits."""
        if not items:
            return
        for observer in self._in_transaction:
            try:
                with transaction.atomic():
                    observer(items)
            except Exception:
                self._failed(observer, items)
        if self._after_commit:
            batch = tuple(items)
            for observer in self._after_commit:
                transaction.on_commit(functools.partial(self._after_commit_call, observer, batch))

    def _after_commit_call(self, observer: Observer[T], items: Sequence[T]) -> None:
        # The commit has happened: a failure here can undo nothing, and must not keep the other
        # after-commit callbacks of the transaction (this port's or anyone's) from running.
        try:
            observer(items)
        except Exception:
            self._failed(observer, items)

    def _failed(self, observer: Observer[T], items: Sequence[T]) -> None:
        logger.exception(
            "%s observer %s failed for %d item(s)", self.what, getattr(observer, "__name__", observer), len(items)
        )


class Port(Generic[T]):
    """A slot for the one implementation of `T` that an app above installs at start-up (or none)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._implementation: T | None = None

    def install(self, implementation: T | None) -> None:
        """Install `implementation` (None: take the installed one out)."""
        self._implementation = implementation

    @property
    def installed(self) -> T | None:
        return self._implementation
