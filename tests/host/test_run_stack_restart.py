"""`make run`'s process manager (scripts/run_stack.py) starts the plugin runtime again when it exits on its
own, with a growing delay, and still stops everything when another process exits."""

from __future__ import annotations

import importlib.util
import io
import signal
import sys
from pathlib import Path
from typing import Any

RUN_STACK = Path(__file__).resolve().parents[2] / "scripts" / "run_stack.py"


def _run_stack() -> Any:
    # Loaded from its file, as the other run_stack tests do (scripts/ is not a package).
    spec = importlib.util.spec_from_file_location("run_stack", RUN_STACK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_dying_runtime_is_restarted_and_the_stack_stops_when_another_process_exits():
    run_stack = _run_stack()
    output = io.StringIO()
    manager = run_stack.ServicesLastManager(run_stack.Printer(output, colour=False, width=7))
    python = sys.executable
    # The runtime crashes 0.2 s after each start; the web process ends on its own after 2.5 s.
    manager.add_process("runtime", f'exec {python} -c "import time, sys; time.sleep(0.2); sys.exit(3)"')
    manager.add_process("web", f'exec {python} -c "import time; time.sleep(2.5)"')
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        manager.loop()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    log = output.getvalue()
    assert "runtime exited with status 3; restarting it in 0.5 s" in log, log
    assert "runtime exited with status 3; restarting it in 1.0 s" in log, log
    assert log.count("runtime started") >= 3, log
    # The web process's exit still ends the stack, with its status.
    assert "web stopped (rc=0)" in log, log
    assert manager.returncode == 0
