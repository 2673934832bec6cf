"""What tracing costs (docs/tracing.md): the stack `make run` starts (`bench/_stack.py`), on PostgreSQL, once with
tracing off (no `OTEL_*` variable) and once exporting every span over OTLP/HTTP to a local sink in this process
(it reads and drops each export request, answering as a collector does). Same load both times, one column each:
runs one at a time (the latency a user sees when the host is idle), then 64 clients (throughput, latency under
load, and the CPU the web and worker processes spent per run, which is where the spans are made and exported).

No target: tracing off must stay at the host's usual figures (`host_overhead`, `host_throughput`); with export,
the difference is the price of the traces.
Usage: `python -m bench.tracing_overhead [--runs N] [--modes off,export]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench._host import ms
from bench._report import percentile
from bench._stack import NotMeasuredError, UserStack, events_many, measure_each, rows_emit, user_stack

LABELS = {"off": "tracing off", "export": "OTLP export on"}
ROLES = ("web", "worker", "runtime")


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    exports = 0
    received = 0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).exports += 1
        type(self).received += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def measure(stack: UserStack, runs: int, sequential: int) -> list[tuple[str, str, str]]:
    await events_many(stack, 128, 64, "warm up")
    alone, alone_statuses, _ = await events_many(stack, sequential, 1, "hello")
    before = stack.cpu_seconds()
    latencies, statuses, elapsed = await events_many(stack, runs, 64, "hello")
    after = stack.cpu_seconds()
    completed = statuses.get("completed", 0)
    used = {role: after.get(role, 0.0) - before.get(role, 0.0) for role in ROLES if role in after}
    rows = [
        ("one run at a time: latency p50", ms(percentile(alone, 50)), "-"),
        ("one run at a time: latency p95", ms(percentile(alone, 95)), "-"),
        ("runs/s at concurrency 64", f"{completed / elapsed:.0f}", "-"),
        ("latency p50 under load", ms(percentile(latencies, 50)), "-"),
        ("latency p95 under load", ms(percentile(latencies, 95)), "-"),
        ("runs completed", f"{completed + alone_statuses.get('completed', 0)}/{runs + sequential}", "all"),
    ]
    rows += [(f"  CPU per run, {role}", ms(used[role] / max(1, completed)), "-") for role in ROLES if role in used]
    return rows


def only(mode: str, runs: int, sequential: int) -> int:
    with contextlib.ExitStack() as stack_of:
        if mode == "export":
            endpoint = stack_of.enter_context(otlp_sink())
            # The stack's processes take this process's environment (bench/_stack.py).
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
            os.environ["OTEL_SERVICE_NAME"] = "langbot-host-bench"
        else:
            for name in [n for n in os.environ if n.startswith("OTEL_")]:
                del os.environ[name]
        try:
            stack = stack_of.enter_context(user_stack("postgresql"))
            rows = asyncio.run(measure(stack, runs, sequential))
        except NotMeasuredError as exc:
            print(f"not measured: {exc}")
            return 1
        if mode == "export":
            rows.append(("OTLP export requests (bytes) during the bench", f"{_Sink.exports} ({_Sink.received})", "-"))
            if not _Sink.exports:
                print("not measured: tracing was on but nothing was exported")
                return 1
    rows_emit(rows)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--sequential", type=int, default=300)
    parser.add_argument("--modes", default="off,export")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        return only(args.only, args.runs, args.sequential)
    from bench._stack import print_by_database

    modes = [m for m in args.modes.split(",") if m]
    extra = ["--runs", str(args.runs), "--sequential", str(args.sequential)]
    return print_by_database(measure_each("tracing_overhead", modes, extra), LABELS)


if __name__ == "__main__":
    raise SystemExit(main())
