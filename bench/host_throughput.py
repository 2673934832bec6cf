"""Sustained runs per second with 64 concurrent clients, qa-runner `ok` (DESIGN §6: ≥ 300 runs/s for one
web + one worker process; here the gateway service runs in the bench process, see `bench/_host.py`).
Usage: `python -m bench.host_throughput [--runs N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench._host import Driver, ensure_threads, host, ms, run_many
from bench._report import percentile, print_table


async def measure(runs: int) -> list[tuple[str, str, str]]:
    ensure_threads(96)
    driver = Driver()
    await driver.start()
    await run_many(driver, 64, 16, "warm up")
    started = time.perf_counter()
    latencies, statuses = await run_many(driver, runs, 64, "hello")
    elapsed = time.perf_counter() - started
    await driver.stop()
    return [
        ("runs/s at concurrency 64", f"{runs / elapsed:.0f}", "≥ 300"),
        ("latency p50 under load", ms(percentile(latencies, 50)), "-"),
        ("latency p95 under load", ms(percentile(latencies, 95)), "-"),
        ("runs completed", f"{statuses.get('completed', 0)}/{runs}", "all"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    with host():
        rows = asyncio.run(measure(args.runs))
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
