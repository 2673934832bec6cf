"""What the chaos tests share: the processes a fault is injected into, found among this test's own children
only (other agents run tests on the same machine), and the counts every row reports."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.processes import REPO_ROOT, _free_port, _host_env

TERMINAL_RESULTS = ("run.completed", "run.failed")


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def descendants(pid: int, *words: str) -> list[psutil.Process]:
    """The live descendants of `pid` whose command line holds every word."""
    found = []
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                line = " ".join(child.cmdline())
                if all(word in line for word in words) and child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
    return found


def stuck_and_duplicated(run_ids: Iterable[str]) -> tuple[int, int]:
    """Runs not ended, and runs with more than one terminal result or assistant reply."""
    from django.db.models import Count

    from runners.models import Run, RunEvent
    from transcripts.models import TranscriptItem

    ids = list(run_ids)
    stuck = Run.objects.filter(run_id__in=ids).exclude(status__in=Run.TERMINAL_STATUSES).count()
    twice = (
        RunEvent.objects.filter(run__run_id__in=ids, type__in=TERMINAL_RESULTS)
        .values("run_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    replies = (
        TranscriptItem.objects.filter(run_id__in=ids, role=TranscriptItem.Role.ASSISTANT)
        .values("run_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    return stuck, twice + replies


@dataclass
class Stack:
    """`scripts/run_stack.py` (what `make run` runs) on this test session's database and Redis."""

    process: subprocess.Popen[bytes]
    base: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def healthz(self) -> tuple[int, dict[str, Any]]:
        try:
            answer = httpx.get(f"{self.base}/healthz", timeout=5)
        except httpx.HTTPError:
            return 0, {}
        with contextlib.suppress(ValueError):
            return answer.status_code, answer.json()
        return answer.status_code, {}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(40)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def _port_pair() -> int:
    for _ in range(50):
        port = _free_port()
        with contextlib.suppress(OSError), socket.socket() as probe:
            probe.bind(("127.0.0.1", port + 1))
            return port
    raise AssertionError("no free pair of ports")


def stack_start(tmp_path: Path, **extra_env: str) -> Stack:
    port = _port_pair()
    log_path = tmp_path / "stack.log"
    env = {
        **_host_env(f"langbot-chaos-{uuid.uuid4().hex[:8]}"),
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "NO_COLOR": "1",
        "LANGBOT_STOP_GRACE": "5",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        **extra_env,
    }
    (tmp_path / "metrics").mkdir(exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "scripts/run_stack.py"], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    stack = Stack(process, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_for(lambda: process.poll() is not None or stack.healthz()[0] == 200, timeout=150, what="/healthz",
                 every=0.3)  # fmt: skip
        assert process.poll() is None, f"make run stopped:\n{stack.log()[-4000:]}"
        wait_for(lambda: "LangBot Host is up" in stack.log(), timeout=60, what="runners synced")
    except BaseException:
        stack.stop()
        raise
    return stack
