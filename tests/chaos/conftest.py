"""Fault tests (`make chaos`): each starts real processes, injects one fault from outside and records a row
— fault, runs affected, outcome, seconds to recover, runs stuck, replies duplicated — that the session
prints as a table at its end. They run only when LANGBOT_CHAOS is set (`make chaos` sets it), so the
default `make test` stays fast; CHAOS_LOOPS sets how many times the looping faults repeat."""

from __future__ import annotations

import os
from typing import Any

from tests.chaos.report import ROWS, table

# Not collected at all unless asked for: a skip would fail CI (.ci/run), an ignore does not.
collect_ignore_glob = [] if os.environ.get("LANGBOT_CHAOS") else ["test_*.py"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS:
        terminalreporter.write_sep("=", "chaos")
        terminalreporter.write_line(table(ROWS))
