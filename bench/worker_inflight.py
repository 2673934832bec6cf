"""In-flight runs held by one worker process: 1,000 qa `slow` runs (20 s each) at once — all must
complete; peak RSS of the worker process and of its runtime child (docs/operations.md, "Performance targets": ≥ 1,000,
RSS ≤ 1 GiB). Usage: `python -m bench.worker_inflight [--runs N] [--sleep S]`.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

import psutil

from bench._host import Driver, ensure_threads, host, run_many
from bench._report import print_table


class PeakRss:
    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.worker = 0
        self.runtime = 0
        self.in_flight = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.worker = max(self.worker, self.process.memory_info().rss)
                children = self.process.children(recursive=True)
                self.runtime = max(self.runtime, sum(c.memory_info().rss for c in children))
            except psutil.Error:
                pass
            self.in_flight = max(self.in_flight, _running())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _running() -> int:
    from django.db import close_old_connections

    from runners.models import Run

    try:
        return Run.objects.filter(status=Run.Status.RUNNING).count()
    finally:
        close_old_connections()


async def measure(runs: int, sleep: float, pid: int) -> list[tuple[str, str, str]]:
    ensure_threads(runs + 16)
    driver = Driver()
    await driver.start()
    await run_many(driver, 8, 4, "warm up")
    with PeakRss(pid) as peak:
        started = time.perf_counter()
        _, statuses = await run_many(driver, runs, runs, f"qa:slow:{sleep:g} hold")
        elapsed = time.perf_counter() - started
    await driver.stop()
    mib = 1024 * 1024
    return [
        ("runs completed", f"{statuses.get('completed', 0)}/{runs}", "all"),
        ("peak runs in flight (running)", str(peak.in_flight), f"≥ {runs}"),
        ("wall time", f"{elapsed:.1f} s", f"≈ {sleep:g} s + admission"),
        ("worker peak RSS", f"{peak.worker / mib:.0f} MiB", "≤ 1024 MiB"),
        ("runtime child peak RSS", f"{peak.runtime / mib:.0f} MiB", "-"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--sleep", type=float, default=20.0)
    args = parser.parse_args()
    with host({"LANGBOT_WORKER_MAX_RUNS": str(max(1000, args.runs))}) as worker:
        rows = asyncio.run(measure(args.runs, args.sleep, worker.pid))
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
