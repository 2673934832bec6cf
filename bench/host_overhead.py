"""Host overhead as a user sees it, event posted → answer with the run ended, qa-runner `ok` (docs/operations.md,
"Performance targets": p50 ≤ 10 ms, p95 ≤ 20 ms on PostgreSQL).

Main figures: a client posts `POST /api/v1/events?wait=10` over HTTP to the stack `make run` starts
(`scripts/run_stack.py`: daphne, the worker as `make run` configures it, the plugin runtime over WebSocket,
beat), one at a time and then from 16 concurrent clients, on PostgreSQL and on SQLite (see `bench/_stack.py`).
The time includes daphne, authentication, request parsing, the gateway, the broker, the worker, the
runtime round trip, the result write, its publication and the answer.

Second row, labelled as such: the gateway service called inside the bench process (no HTTP, no
authentication, a worker started by `bench/_host.py`), split into four stages (`run_stages`) to show where a
run's time goes after the request is parsed.

Exits 1 when a database could not be measured; a missed target is reported, never failed.
Usage: `python -m bench.host_overhead [--runs N] [--databases postgresql,sqlite,in-process]`.
"""

from __future__ import annotations

import argparse
import asyncio

from asgiref.sync import sync_to_async

from bench._host import Driver, ensure_threads, host, ms, run_many, run_stages
from bench._report import percentile
from bench._stack import (
    NotMeasuredError,
    UserStack,
    events_many,
    measure_each,
    print_by_database,
    rows_emit,
    user_stack,
)

LABELS = {
    "postgresql": "HTTP, PostgreSQL",
    "sqlite": "HTTP, SQLite",
    "in-process": "in-process, PostgreSQL (no HTTP)",
}


def _rows(sequential: list[float], concurrent: list[float], completed: int, total: int) -> list[tuple[str, str, str]]:
    return [
        ("sequential p50", ms(percentile(sequential, 50)), "≤ 10 ms"),
        ("sequential p95", ms(percentile(sequential, 95)), "≤ 20 ms"),
        ("concurrency 16 p50", ms(percentile(concurrent, 50)), "-"),
        ("concurrency 16 p95", ms(percentile(concurrent, 95)), "-"),
        ("runs completed", f"{completed}/{total}", "all"),
    ]


async def measure_http(stack: UserStack, runs: int) -> list[tuple[str, str, str]]:
    await events_many(stack, 30, 4, "warm up")
    sequential, seq_status, _ = await events_many(stack, runs, 1, "hello")
    concurrent, con_status, _ = await events_many(stack, runs * 2, 16, "hello")
    completed = seq_status.get("completed", 0) + con_status.get("completed", 0)
    return _rows(sequential, concurrent, completed, runs * 3)


async def measure_in_process(runs: int) -> list[tuple[str, str, str]]:
    ensure_threads(64)
    driver = Driver()
    await driver.start()
    await run_many(driver, 30, 4, "warm up")
    driver.marks.clear()
    sequential, seq_status = await run_many(driver, runs, 1, "hello")
    stages = await sync_to_async(run_stages, thread_sensitive=False)(dict(driver.marks))
    concurrent, con_status = await run_many(driver, runs * 2, 16, "hello")
    completed = seq_status.get("completed", 0) + con_status.get("completed", 0)
    rows = _rows(sequential, concurrent, completed, runs * 3)
    rows[2:2] = [(f"  sequential p50, {name}", ms(percentile(values, 50)), "-") for name, values in stages.items()]
    return rows


def only(kind: str, runs: int) -> int:
    try:
        if kind == "in-process":
            with host():
                rows = asyncio.run(measure_in_process(runs))
        else:
            with user_stack(kind) as stack:
                rows = asyncio.run(measure_http(stack, runs))
    except NotMeasuredError as exc:
        print(f"not measured: {exc}")
        return 1
    rows_emit(rows)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--databases", default="postgresql,sqlite,in-process")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        return only(args.only, args.runs)
    kinds = [k for k in args.databases.split(",") if k]
    return print_by_database(measure_each("host_overhead", kinds, ["--runs", str(args.runs)]), LABELS)


if __name__ == "__main__":
    raise SystemExit(main())
