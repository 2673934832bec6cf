"""Benchmark of the plugin runtime over stdio: run latency and result throughput on one connection.

Run with `python bench/runtime_roundtrip.py` (options: `--help`). It starts `python -m
langbot_sdk.runtime --stdio` with the repository's plugins, acts as the host and measures
  * `run_agent` → first result latency of sequential qa `ok` runs (p50 / p99), and
  * results per second of many concurrent qa `stream` runs multiplexed over the one connection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench._report import percentile  # noqa: E402
from langbot_sdk.wire import Connection, spawn_stdio_transport  # noqa: E402

QA_RUNNER_ID = "plugin:langbot/qa-runner/default"
P50_TARGET_MS = 1.0
THROUGHPUT_TARGET = 5000.0


def run_request(text: str) -> dict[str, Any]:
    run_id = uuid.uuid4().hex
    return {
        "runner_id": QA_RUNNER_ID,
        "runner_name": "default",
        "context": {
            "run_id": run_id,
            "trigger": {"type": "message.received", "source": "api"},
            "event": {"event_id": run_id, "event_type": "message.received", "source": "api"},
            "conversation": {"conversation_id": "bench"},
            "input": {"text": text},
            "delivery": {"surface": "api", "supports_streaming": True},
            "context": {"conversation_id": "bench"},
            "runtime": {"trace_id": run_id, "deadline_at": time.time() + 300},
        },
    }


async def first_result_latency(connection: Connection, text: str) -> float:
    request = run_request(text)
    started = time.perf_counter()
    stream = connection.stream("run_agent", request)
    first = await stream.__anext__()
    elapsed = time.perf_counter() - started
    assert first["type"] == "message.completed", first
    async for _ in stream:  # drain the rest (run.completed) before the next run
        pass
    return elapsed


async def collect(connection: Connection, text: str) -> int:
    count = 0
    async for result in connection.stream("run_agent", run_request(text)):
        count += 1
        last = result
    assert last["type"] == "run.completed", last
    return count




async def main(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "langbot_sdk.runtime", "--stdio", "--log-level", "WARNING"]
    transport, process = await spawn_stdio_transport(
        [*argv, "--plugins-dir", str(REPO_ROOT / "plugins")], env=env, cwd=str(REPO_ROOT)
    )
    connection = Connection(transport, name="bench-host")
    await connection.start()
    try:
        for _ in range(args.warmup):
            await first_result_latency(connection, "qa:ok warm")
        latencies = [await first_result_latency(connection, "qa:ok bench") for _ in range(args.runs)]

        text = f"qa:stream:{args.deltas} bench"
        await asyncio.gather(*(collect(connection, text) for _ in range(50)))  # warm the stream path
        started = time.perf_counter()
        counts = await asyncio.gather(*(collect(connection, text) for _ in range(args.concurrent)))
        elapsed = time.perf_counter() - started
    finally:
        await connection.close()
        await asyncio.wait_for(process.wait(), timeout=10)

    p50_ms = statistics.median(latencies) * 1000
    p99_ms = percentile(latencies, 99) * 1000
    throughput = sum(counts) / elapsed
    rows = [
        ("run_agent → first result p50 (qa ok)", f"{p50_ms:.3f} ms", f"≤ {P50_TARGET_MS:g} ms"),
        ("run_agent → first result p99 (qa ok)", f"{p99_ms:.3f} ms", "-"),
        (
            f"results/s, {args.concurrent} concurrent qa stream runs ({sum(counts)} results)",
            f"{throughput:,.0f}",
            f"≥ {THROUGHPUT_TARGET:,.0f}",
        ),
    ]
    width = max(len(row[0]) for row in rows)
    print(f"{'metric'.ljust(width)} | {'value':>12} | target")
    print(f"{'-' * width}-|-{'-' * 12}-|-------")
    for metric, value, target in rows:
        print(f"{metric.ljust(width)} | {value:>12} | {target}")
    ok = p50_ms <= P50_TARGET_MS and throughput >= THROUGHPUT_TARGET
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup", type=int, default=200, help="sequential runs before measuring")
    parser.add_argument("--runs", type=int, default=2000, help="sequential qa ok runs measured")
    parser.add_argument("--concurrent", type=int, default=1000, help="concurrent qa stream runs")
    parser.add_argument("--deltas", type=int, default=10, help="message.delta results per stream run")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
