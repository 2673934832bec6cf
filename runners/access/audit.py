"""The audit trail of proxy calls (docs/security.md, "Runner code"): one `ProxyCallAudit` row per call, allowed
or refused, with run, runner, action, resource, scope, outcome and duration.

A row per call must not cost a database round trip per call, so `AuditLog` buffers entries in memory
and writes them with one `bulk_create` per flush: when `AUDIT_FLUSH_ROWS` entries are waiting, or
`AUDIT_FLUSH_SECONDS` after the first one. Flushes run on the worker's database executor, never on
the call's path. A flush that fails is logged and retried once with the next batch (the rows stay
buffered, up to `AUDIT_BUFFER_MAX`; beyond that the oldest are dropped with a warning rather than
letting memory grow without bound). Every entry is also logged on the `runners.access.audit` logger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from runners.metrics import PROXY_CALLS
from runners.models import ProxyCallAudit

logger = logging.getLogger("runners.access.audit")

AUDIT_FLUSH_ROWS = 200
AUDIT_FLUSH_SECONDS = 0.5
AUDIT_BUFFER_MAX = 50_000

DatabaseCall = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class AuditEntry:
    run_id: str
    runner_id: str
    workspace_id: int | None
    action: str
    resource: str
    scope: str
    caller: str
    outcome: str
    duration_ms: float
    created_at: datetime

    def row(self) -> ProxyCallAudit:
        return ProxyCallAudit(
            run_id=self.run_id[:64],
            runner_id=self.runner_id[:255],
            workspace_id=self.workspace_id,
            action=self.action[:64],
            resource=self.resource[:300],
            scope=self.scope[:300],
            caller=self.caller[:200],
            outcome=self.outcome[:32],
            duration_ms=round(self.duration_ms, 3),
            created_at=self.created_at,
        )


def audit_rows_write(*, entries: list[AuditEntry]) -> int:
    """Insert audit rows in one statement (synchronous; called on the database executor)."""
    ProxyCallAudit.objects.bulk_create([entry.row() for entry in entries], batch_size=1000)
    return len(entries)


class AuditLog:
    """Buffered writer of audit rows for one event loop (the worker's)."""

    def __init__(self, db: DatabaseCall) -> None:
        self._db = db
        self._buffer: list[AuditEntry] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    def record(
        self,
        *,
        run_id: str,
        runner_id: str,
        workspace_id: int | None,
        action: str,
        resource: str,
        scope: str,
        caller: str,
        outcome: str,
        duration_ms: float,
    ) -> None:
        entry = AuditEntry(
            run_id=run_id,
            runner_id=runner_id,
            workspace_id=workspace_id,
            action=action,
            resource=resource,
            scope=scope,
            caller=caller,
            outcome=outcome,
            duration_ms=duration_ms,
            created_at=timezone.now(),
        )
        logger.info(
            "run=%s runner=%s action=%s resource=%s scope=%s outcome=%s ms=%.2f",
            run_id, runner_id, action, resource, scope, outcome, duration_ms,
        )  # fmt: skip
        PROXY_CALLS.labels(action, outcome).inc()
        self._buffer.append(entry)
        if len(self._buffer) > AUDIT_BUFFER_MAX:
            dropped = len(self._buffer) - AUDIT_BUFFER_MAX
            del self._buffer[:dropped]
            logger.warning("audit buffer full: dropped the %d oldest entries", dropped)
        self._schedule()

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        if len(self._buffer) >= AUDIT_FLUSH_ROWS:
            self._start_flush()
        elif self._timer is None:
            self._timer = loop.call_later(AUDIT_FLUSH_SECONDS, self._start_flush)

    def _start_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._buffer:
            batch, self._buffer = self._buffer, []
            try:
                await self._db(audit_rows_write, entries=batch)
            except Exception:
                logger.exception("could not write %d audit rows; they are kept for the next flush", len(batch))
                self._buffer[:0] = batch
                return

    async def flush(self) -> None:
        """Write everything buffered now (tests, shutdown)."""
        self._start_flush()
        if self._flushing is not None:
            await self._flushing

    @property
    def pending(self) -> int:
        return len(self._buffer)
