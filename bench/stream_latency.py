"""Runner emit → WebSocket client receipt, with 100 concurrent chat WebSocket clients each watching its own
streaming run (docs/operations.md, "Performance targets": p50 ≤ 10 ms, p99 ≤ 50 ms, every delta delivered in order), on
the stack `make run` starts (`bench/_stack.py`: daphne, the worker with its `make run` settings, the runtime over
WebSocket), on PostgreSQL and on SQLite. Each client takes a one-time ticket, opens `/ws/v1/chat/` as the browser does,
and sends a message that starts a run of the stream-probe runner (`bench/plugins/stream-probe`), whose
results are stamped with their emit time in ms. Latency = receipt time in the client − emit stamp.

Three loads:
- tokens, one stream alone at 50 deltas/s: the pipeline is idle between deltas, so this shows what the host
  adds to a delta by itself (a coalescing timer would show here);
- tokens: 100 streams × 50 deltas/s (a normal LLM pace), deltas only — nothing flushes the host's delta
  merging, so the figures include whatever a delta waits in the host. Deltas the host merged carry all
  their stamps; every stamp must arrive, in emit order.
- paced: 10 steps 500 ms apart, each a delta and a tool call (the earlier form of this benchmark).
All 100 messages are sent at once, so the first second also measures delivery while the web process works
through 100 chat submissions (a real start-up burst, deliberately kept in the figures).

Beside the figures over the whole load, the 100 streams' figures from the load's second second on (every run
started, the burst over) show what a delta waits once they all stream; BENCH_STREAM_TIMELINE=1 prints them per
quarter second.

Exits 1 when nothing could be measured; a missed target is reported, never failed.
Usage: `python -m bench.stream_latency [--databases postgresql,sqlite] [--seconds S]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench._report import percentile
from bench._stack import NotMeasuredError, UserStack, measure_each, print_by_database, rows_emit, user_stack
from bench._stream import PROBE_DIR, PROBE_RUNNER_ID, REPO, ChatClient

CLIENTS = int(os.environ.get("STREAM_CLIENTS", "100"))
TOKEN_RATE = 50
PACED_STEPS, PACED_INTERVAL_MS = 10, 500
STAMP = re.compile(r"<(\d+(?:\.\d+)?)>")
LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}
# Where the start-up burst is over: every run has been claimed and is streaming (see `settled`).
SETTLED_MS = 2000.0


class Seen:
    def __init__(self) -> None:
        self.tool: list[float] = []
        self.delta: list[float] = []
        self.delta_received: list[float] = []  # receipt time (ms) of each `delta` latency, in the same order
        self.out_of_order = 0


async def watch(client: ChatClient, stack: UserStack, text: str, seen: Seen) -> str:
    await client.send(
        {"type": "message", "conversation_id": f"latency-{uuid.uuid4().hex}", "binding_id": stack.binding_id,
         "text": text}
    )  # fmt: skip
    last_stamp = 0.0
    while True:
        message = await asyncio.wait_for(client.receive(), 60)
        received = time.time() * 1000
        if message["type"] == "error":
            return f"error {message['code']}"
        if message["type"] != "run.event":
            continue
        event = message["event"]
        if event["type"] == "tool.call.started":
            seen.tool.append(received - float(event["data"]["parameters"]["emitted_ms"]))
        elif event["type"] == "message.delta":
            for stamp in (float(s) for s in STAMP.findall(str(event["data"]["chunk"]["content"]))):
                seen.out_of_order += stamp < last_stamp
                last_stamp = stamp
                seen.delta.append(received - stamp)
                seen.delta_received.append(received)
        elif event["type"] in ("run.completed", "run.failed"):
            return event["type"]


def settled(seen: Seen, after_ms: float) -> list[float]:
    """The delta latencies received `after_ms` or later after the load's first delta: the streams once
    every run has started and the start-up burst (100 chat submissions, 100 claims) is over."""
    if not seen.delta_received:
        return []
    first = min(seen.delta_received)
    return [lat for lat, at in zip(seen.delta, seen.delta_received, strict=True) if at - first >= after_ms]


# BENCH_STREAM_TIMELINE=1: the 100-stream latencies per quarter second of the load, on stderr.
def _timeline(seen: Seen) -> None:
    if not os.environ.get("BENCH_STREAM_TIMELINE") or not seen.delta_received:
        return
    first = min(seen.delta_received)
    quarters: dict[int, list[float]] = {}
    for lat, at in zip(seen.delta, seen.delta_received, strict=True):
        quarters.setdefault(int((at - first) // 250), []).append(lat)
    for quarter, lats in sorted(quarters.items()):
        print(f"  from {quarter * 250:5d} ms: {len(lats):5d} deltas, p50 {percentile(lats, 50):7.1f} ms,"
              f" p99 {percentile(lats, 99):7.1f} ms", file=sys.stderr)  # fmt: skip


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


# BENCH_STREAM_PROFILE=DIR: py-spy samples the web process and the worker during the 100-stream load and
# prints which of the host's functions their CPU is under (bench/profile_run.py's `own_frames`).
PROFILE_DIR = os.environ.get("BENCH_STREAM_PROFILE", "")


def _profile_start(stack: UserStack) -> dict[str, Any]:
    if not PROFILE_DIR:
        return {}
    from bench.profile_run import _record

    Path(PROFILE_DIR).mkdir(parents=True, exist_ok=True)
    return {
        role: _record(stack.roles[role].pid, Path(PROFILE_DIR) / f"stream-{role}.raw", 200)
        for role in ("web", "worker")
        if role in stack.roles
    }


def _profile_stop(recorders: dict[str, Any]) -> None:
    if not recorders:
        return
    from bench.profile_run import _stop_record, own_frames

    for role, recorder in recorders.items():
        _stop_record(recorder)
        found = own_frames(Path(PROFILE_DIR) / f"stream-{role}.raw")
        total = sum(found.values()) or 1
        # On stderr: the parent process passes only the rows of this child's stdout on.
        print(f"{role}: {total} samples during the {CLIENTS}-stream load; the host's functions they are under:",
              file=sys.stderr)  # fmt: skip
        for frame, count in found.most_common(15):
            print(f"  {100 * count / total:5.1f}%  {frame}", file=sys.stderr)


async def load(clients: list[ChatClient], stack: UserStack, text: str) -> tuple[Seen, int, float]:
    seen = Seen()
    started = time.perf_counter()
    outcomes = await asyncio.gather(*(watch(c, stack, text, seen) for c in clients), return_exceptions=True)
    failures = [o for o in outcomes if o != "run.completed"]
    if failures:
        print(f"{len(failures)} client(s) did not see their run complete: {failures[:5]}")
    return seen, len(outcomes) - len(failures), time.perf_counter() - started


async def measure(stack: UserStack, seconds: float) -> list[tuple[str, str, str]]:
    steps = int(seconds * TOKEN_RATE)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=CLIENTS), timeout=30) as http:
        clients = [ChatClient(stack, http) for _ in range(CLIENTS)]
        await asyncio.gather(*(c.connect() for c in clients))
        # A warm-up run so first-use costs (imports, connection pools) are not measured.
        await watch(clients[0], stack, "probe:5:20:deltas", Seen())
        # One stream alone: the pipeline is idle between deltas, so whatever a delta waits is added delay.
        single, single_done, _ = await load(clients[:1], stack, f"probe:{steps}:{1000 // TOKEN_RATE}:deltas")
        before = stack.cpu_seconds()
        client_before = _own_cpu()
        recorders = _profile_start(stack)
        tokens, tokens_done, tokens_seconds = await load(clients, stack, f"probe:{steps}:{1000 // TOKEN_RATE}:deltas")
        after = stack.cpu_seconds()
        client_busy = (_own_cpu() - client_before) / tokens_seconds
        _profile_stop(recorders)
        _timeline(tokens)
        paced, paced_done, _ = await load(clients, stack, f"probe:{PACED_STEPS}:{PACED_INTERVAL_MS}")
        await asyncio.gather(*(c.close() for c in clients))
    if not tokens.delta and not paced.tool:
        raise NotMeasuredError("no stamped event arrived")
    steady = settled(tokens, SETTLED_MS) or [0.0]
    return [
        (f"tokens, 1 stream × {TOKEN_RATE} deltas/s: run completed", f"{single_done}/1", "all"),
        ("  1 stream: deltas received / emitted", f"{len(single.delta)}/{steps}", "all"),
        ("  1 stream: emit → socket p50", f"{percentile(single.delta, 50):.1f} ms", "≤ 10 ms"),
        ("  1 stream: emit → socket p99", f"{percentile(single.delta, 99):.1f} ms", "≤ 50 ms"),
        (f"tokens, {CLIENTS} streams × {TOKEN_RATE} deltas/s: runs completed", f"{tokens_done}/{CLIENTS}", "all"),
        (f"  {CLIENTS} streams: deltas received / emitted", f"{len(tokens.delta)}/{steps * CLIENTS}", "all"),
        (f"  {CLIENTS} streams: deltas out of order", str(tokens.out_of_order + single.out_of_order), "0"),
        (f"  {CLIENTS} streams: emit → socket p50", f"{percentile(tokens.delta, 50):.1f} ms", "≤ 10 ms"),
        (f"  {CLIENTS} streams: emit → socket p99", f"{percentile(tokens.delta, 99):.1f} ms", "≤ 50 ms"),
        (f"  {CLIENTS} streams from {SETTLED_MS / 1000:g} s on: emit → socket p50 / p99",
         f"{percentile(steady, 50):.1f} / {percentile(steady, 99):.1f} ms", "-"),
        *(
            (f"  {CLIENTS} streams: CPU of {role} (cores busy)", f"{busy:.2f}", "-")
            for role in ("web", "worker", "runtime")
            if role in after and (busy := (after[role] - before.get(role, 0.0)) / tokens_seconds) >= 0
        ),
        (f"  {CLIENTS} streams: CPU of this benchmark's clients (cores busy)", f"{client_busy:.2f}", "-"),
        ("  load average (1 min) after", f"{os.getloadavg()[0]:.1f}", "-"),
        (f"paced, {CLIENTS} × {PACED_STEPS} steps {PACED_INTERVAL_MS} ms apart, delta + tool call: runs completed",
         f"{paced_done}/{CLIENTS}", "all"),
        ("  paced: emit → socket p50 (tool.call.started)", f"{percentile(paced.tool, 50):.1f} ms", "-"),
        ("  paced: emit → socket p99 (tool.call.started)", f"{percentile(paced.tool, 99):.1f} ms", "≤ 50 ms"),
        ("  paced: emit → socket p99 (message.delta)", f"{percentile(paced.delta, 99):.1f} ms", "≤ 50 ms"),
    ]  # fmt: skip


def only(kind: str, seconds: float) -> int:
    try:
        with user_stack(
            kind, runner_id=PROBE_RUNNER_ID, plugin_dirs=[REPO / "plugins", PROBE_DIR], policy="parallel"
        ) as stack:
            rows = asyncio.run(measure(stack, seconds))
    except NotMeasuredError as exc:
        print(f"not measured: {exc}")
        return 1
    rows_emit(rows)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--databases", default="postgresql,sqlite")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each token stream")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        return only(args.only, args.seconds)
    kinds = [k for k in args.databases.split(",") if k]
    return print_by_database(measure_each("stream_latency", kinds, ["--seconds", str(args.seconds)]), LABELS)


if __name__ == "__main__":
    raise SystemExit(main())
