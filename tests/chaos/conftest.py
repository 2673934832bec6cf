"""Fault tests (`make chaos`): each starts real processes, injects one fault from outside and records a row
— fault, runs affected, outcome, seconds to recover, runs stuck, replies duplicated — that the session
prints as a table at its end. They run only when LANGBOT_CHAOS is set (`make chaos` sets it), so the
default `make test` stays fast; CHAOS_LOOPS sets how many times the looping faults repeat."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.chaos.report import ROWS, table
from tests.processes import WorkerProcess

# Not collected at all unless asked for: a skip would fail CI (.ci/run), an ignore does not.
collect_ignore_glob = [] if os.environ.get("LANGBOT_CHAOS") else ["test_*.py"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS:
        terminalreporter.write_sep("=", "chaos")
        terminalreporter.write_line(table(ROWS))


@pytest.fixture
def private_worker(start_worker: Callable[..., WorkerProcess]) -> Iterator[Callable[[], WorkerProcess]]:
    """Start workers on a queue of this test's own, where this process sends its runs meanwhile: the
    session's shared worker (other tests') must not take the runs whose worker or runtime gets killed."""
    from langbot_host.celery import app

    queue = f"langbot-chaos-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    yield lambda: start_worker(CELERY_TASK_DEFAULT_QUEUE=queue)
    app.conf.task_default_queue = previous
