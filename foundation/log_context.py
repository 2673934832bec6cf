"""The run a log record belongs to: `run_id` and `workspace` on every record logged while a run executes.

Code that executes a run sets them with `log_context(...)` (a context variable, so each asyncio task and
each thread sees its own run); `RunContextFilter`, installed on the log handlers by `settings.LOGGING`,
copies them onto every record, `-` outside a run, so the log format can always name them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_run: ContextVar[tuple[str, str] | None] = ContextVar("langbot_log_run", default=None)


def log_context_set(*, run_id: str, workspace: str) -> None:
    """Mark the rest of the current task (or thread) as executing this run."""
    _run.set((run_id, workspace))


@contextmanager
def log_context(*, run_id: str, workspace: str) -> Iterator[None]:
    """Mark what runs inside the block as executing this run (threads that are reused: Celery's pool)."""
    token = _run.set((run_id, workspace))
    try:
        yield
    finally:
        _run.reset(token)


class RunContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        current = _run.get()
        # A record may name its run explicitly (`extra={"run_id": ...}`); that wins over the context.
        if not hasattr(record, "run_id"):
            record.run_id = current[0] if current else "-"
        if not hasattr(record, "workspace"):
            record.workspace = current[1] if current else "-"
        return True
