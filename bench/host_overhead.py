"""Host overhead, event accepted → run completed, qa-runner `ok` (DESIGN §6: p50 ≤ 10 ms, p95 ≤ 20 ms).

Sequential runs, then 16 concurrent clients. Events enter through the gateway service (no HTTP); one
worker process (thread pool, one runtime over stdio) runs them. See `bench/_host.py`. The sequential p50
is also split into four stages (`run_stages`), to show where a run's time goes.
Usage: `python -m bench.host_overhead [--runs N]`.
"""

from __future__ import annotations

import argparse
import asyncio

from asgiref.sync import sync_to_async

from bench._host import Driver, ensure_threads, host, ms, run_many, run_stages
from bench._report import percentile, print_table


async def measure(runs: int) -> list[tuple[str, str, str]]:
    ensure_threads(64)
    driver = Driver()
    await driver.start()
    await run_many(driver, 30, 4, "warm up")
    driver.marks.clear()
    sequential, seq_status = await run_many(driver, runs, 1, "hello")
    stages = await sync_to_async(run_stages, thread_sensitive=False)(dict(driver.marks))
    concurrent, con_status = await run_many(driver, runs * 2, 16, "hello")
    await driver.stop()
    completed = seq_status.get("completed", 0) + con_status.get("completed", 0)
    return [
        ("sequential p50", ms(percentile(sequential, 50)), "≤ 10 ms"),
        ("sequential p95", ms(percentile(sequential, 95)), "≤ 20 ms"),
        *((f"  sequential p50, {name}", ms(percentile(values, 50)), "-") for name, values in stages.items()),
        ("concurrency 16 p50", ms(percentile(concurrent, 50)), "≤ 10 ms"),
        ("concurrency 16 p95", ms(percentile(concurrent, 95)), "≤ 20 ms"),
        ("runs completed", f"{completed}/{runs * 3}", "all"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with host():
        rows = asyncio.run(measure(args.runs))
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
