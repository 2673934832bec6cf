"""How the plugin runtime stops on a signal: gracefully while it serves, and without leaving its handlers
pointed at a loop that is being closed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from langbot_sdk.runtime.__main__ import _stop_signals

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_stops_a_serving_runtime_cleanly(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "langbot_sdk.runtime", "--plugins-dir", str(tmp_path), "--listen", "127.0.0.1:0"],
        cwd=REPO_ROOT,
        env={**os.environ, "LANGBOT_RUNTIME_TOKEN": "signals-test-token"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:
            lines.append(line)
            if "listening on ws://" in line:
                break
        else:
            pytest.fail(f"the runtime never listened: {''.join(lines)}")
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert "Traceback" not in rest
    assert "Exception ignored" not in rest


@pytest.mark.asyncio
async def test_the_stop_handlers_are_gone_before_the_loop_closes() -> None:
    """Once the runtime has stopped serving, a late SIGTERM (a host closes the connection, then
    terminates the child) must not be written to the wakeup pipe that closing the loop is about to close:
    Python would print "Exception ignored ... Bad file descriptor" into the host's log."""
    with _stop_signals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 5)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.set_wakeup_fd(-1) == -1
