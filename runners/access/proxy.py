"""The slot the host API's proxy handlers are installed in: the worker serves every runtime → host call of
its runs with them, and the `hostapi` app, which stands above `runners`, installs them at start-up
(`HostapiConfig.ready`). A worker started without them refuses to start rather than answer every call with
"unknown action"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from foundation.ports import Port
from foundation.sql import DatabaseExecutor
from langbot_sdk.wire import Handler
from runners.access.audit import AuditLog
from runners.access.session import RunSession

SessionLookup = Callable[[str], tuple[RunSession, float] | None]
"""run token → (session, deadline as epoch seconds) of the active run, held by this worker, it was issued to."""


class ProxyHandlers(Protocol):
    def __call__(self, *, sessions: SessionLookup, db: DatabaseExecutor, audit: AuditLog) -> dict[str, Handler]:
        """One handler per runtime → host action, bound to a worker's run sessions."""
        ...


proxy_handlers_port: Port[ProxyHandlers] = Port("proxy handlers")


def proxy_handlers_for_worker(*, sessions: SessionLookup, db: DatabaseExecutor, audit: AuditLog) -> dict[str, Handler]:
    """The installed handlers, bound to one worker."""
    factory = proxy_handlers_port.installed
    if factory is None:
        raise RuntimeError("no host API handlers are installed: is the 'hostapi' app in INSTALLED_APPS?")
    return factory(sessions=sessions, db=db, audit=audit)
