"""Sustained runs per second with 64 concurrent clients, qa-runner `ok` (docs/operations.md, "Performance targets": ≥
300 runs/s for one web + one worker process, PostgreSQL, 2 cores).

Main figures: 64 clients post `POST /api/v1/events?wait=10` over HTTP to the stack `make run` starts
(`bench/_stack.py`), on PostgreSQL and on SQLite, each client sending its next event when the last one's
answer arrives. Also the CPU each process of the stack spent per run, and runs per CPU-second of the stack
(database and Redis servers not counted: shared on the development machine).

Second row, labelled as such: the gateway service called inside the bench process (no HTTP; `bench/_host.py`).
Exits 1 when a database could not be measured; a missed target is reported, never failed.
Usage: `python -m bench.host_throughput [--runs N] [--databases postgresql,sqlite,in-process]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench._host import Driver, ensure_threads, host, ms, run_many
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
ROLES = ("web", "web loop thread", "worker", "runtime", "beat")


async def measure_http(stack: UserStack, runs: int) -> list[tuple[str, str, str]]:
    await events_many(stack, 128, 64, "warm up")
    before = stack.cpu_seconds()
    latencies, statuses, elapsed = await events_many(stack, runs, 64, "hello")
    after = stack.cpu_seconds()
    used = {role: after.get(role, 0.0) - before.get(role, 0.0) for role in ROLES if role in after}
    completed = statuses.get("completed", 0)
    total_cpu = sum(seconds for role, seconds in used.items() if role != "web loop thread")
    rows = [
        ("runs/s at concurrency 64", f"{completed / elapsed:.0f}", "≥ 300"),
        ("latency p50 under load", ms(percentile(latencies, 50)), "-"),
        ("latency p95 under load", ms(percentile(latencies, 95)), "-"),
        ("runs completed", f"{completed}/{runs}", "all"),
        ("runs per CPU-second (web + worker + runtime + beat)", f"{completed / total_cpu:.0f}" if total_cpu else "-",
         "-"),
    ]  # fmt: skip
    rows += [
        (
            f"  CPU per run, {'  of which ' if role == 'web loop thread' else ''}{role}",
            ms(used[role] / max(1, completed)),
            "-",
        )
        for role in ROLES
        if role in used
    ]
    return rows


async def measure_in_process(runs: int) -> list[tuple[str, str, str]]:
    ensure_threads(96)
    driver = Driver()
    await driver.start()
    await run_many(driver, 64, 16, "warm up")
    started = time.perf_counter()
    latencies, statuses = await run_many(driver, runs, 64, "hello")
    elapsed = time.perf_counter() - started
    return [
        ("runs/s at concurrency 64", f"{statuses.get('completed', 0) / elapsed:.0f}", "≥ 300"),
        ("latency p50 under load", ms(percentile(latencies, 50)), "-"),
        ("latency p95 under load", ms(percentile(latencies, 95)), "-"),
        ("runs completed", f"{statuses.get('completed', 0)}/{runs}", "all"),
    ]


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
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--databases", default="postgresql,sqlite,in-process")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        return only(args.only, args.runs)
    kinds = [k for k in args.databases.split(",") if k]
    return print_by_database(measure_each("host_throughput", kinds, ["--runs", str(args.runs)]), LABELS)


if __name__ == "__main__":
    raise SystemExit(main())
