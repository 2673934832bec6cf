"""The ASGI server under the same load (issue 33, item 2): daphne as `make run` starts it against uvicorn
(uvloop, httptools) and granian, each serving `langbot_host.asgi:application` beside the one stack
(`bench/_stack.py`: the same database, worker, runtime and Redis), so only the web server differs.

Each round runs every server in turn (the order reversed every other round, so that a drift of the shared
machine's load does not favour one): `--sequential` single-client `POST /api/v1/events?wait=10` (p50), then
`--runs` of them from 64 clients (runs/s, p50, p95), with the CPU the server process (and its children) used
per run. The extra servers get the web process's own environment. Medians over the rounds are printed last.

uvicorn[standard] and granian are not in requirements: install them to compare (`pip install uvicorn uvloop
httptools granian`); a server that is not installed is left out and said so. `daphne@PATH` is daphne
started from another checkout (e.g. a `git worktree` of the commit before a change to the web process's
code, same migrations): the same stack then compares the web code before and after, in alternating turns.
Usage: `python -m bench.asgi_servers [--rounds 3] [--runs 1000] [--sequential 150] [--servers daphne,uvicorn,granian]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from bench._host import REPO
from bench._report import percentile, print_grid
from bench._stack import NotMeasuredError, UserStack, event_wait, events_many, user_stack

APP = "langbot_host.asgi:application"


def _port() -> int:
    span = os.environ.get("BENCH_PORTS", "")
    first, _, last = span.partition("-")
    candidates = range(int(last or first), int(first), -1) if span else [0]
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise NotMeasuredError("no free port")


def _command(server: str, port: int) -> list[str]:
    python = sys.executable
    if server.startswith("daphne"):
        return [python, "-m", "langbot_host.web", "-b", "127.0.0.1", "-p", str(port), APP]
    if server == "uvicorn":
        return [python, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop", "--http",
                "httptools", "--lifespan", "off", APP]  # fmt: skip
    if server == "granian":
        return [str(Path(python).parent / "granian"), "--interface", "asgi", "--host", "127.0.0.1", "--port",
                str(port), "--workers", "1", "--loop", "uvloop", "--no-ws", "--access-log", APP]  # fmt: skip
    raise ValueError(server)


# What each server's command line above needs besides itself.
NEEDS = {"uvicorn": ("uvicorn", "uvloop", "httptools"), "granian": ("granian", "uvloop")}


def _installed(server: str) -> bool:
    name = server.partition("@")[0]
    return all(importlib.util.find_spec(module) is not None for module in NEEDS.get(name, ()))


@contextlib.contextmanager
def _extra_server(stack: UserStack, server: str) -> Iterator[tuple[str, psutil.Process]]:
    port = _port()
    env = stack.roles["web"].environ()
    env["PORT"] = str(port)
    name, _, tree = server.partition("@")
    log = REPO / "var" / f"bench-asgi-{name}-{port}.log"
    process = subprocess.Popen(
        _command(name, port), cwd=tree or REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise NotMeasuredError(f"{server} stopped; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=3).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise NotMeasuredError(f"{server} did not answer; see {log}")
            time.sleep(0.3)
        yield base, psutil.Process(process.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _cpu(process: psutil.Process) -> float:
    with contextlib.suppress(psutil.Error):
        times = process.cpu_times()
        return (
            times.user + times.system + sum(c.cpu_times().user + c.cpu_times().system for c in process.children(True))
        )
    return 0.0


async def _sequential(stack: UserStack, count: int) -> list[float]:
    latencies = []
    async with httpx.AsyncClient(timeout=30) as client:
        for i in range(count):
            elapsed, _ = await event_wait(client, stack, "hello", f"seq-{time.time_ns()}-{i}")
            latencies.append(elapsed)
    return latencies


async def _one(stack: UserStack, process: psutil.Process, runs: int, sequential: int) -> dict[str, float]:
    seq = await _sequential(stack, sequential)
    before, worker_before = _cpu(process), _cpu(stack.roles["worker"])
    latencies, statuses, elapsed = await events_many(stack, runs, 64, "hello")
    after, worker_after = _cpu(process), _cpu(stack.roles["worker"])
    done = max(1, statuses.get("completed", 0))
    return {
        "sequential p50 ms": 1000 * percentile(seq, 50),
        "runs/s at 64": statuses.get("completed", 0) / elapsed,
        "p50 at 64 ms": 1000 * percentile(latencies, 50),
        "p95 at 64 ms": 1000 * percentile(latencies, 95),
        "server CPU per run ms": 1000 * (after - before) / done,
        "worker CPU per run ms": 1000 * (worker_after - worker_before) / done,
        "load average": os.getloadavg()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--sequential", type=int, default=150)
    parser.add_argument("--servers", default="daphne,uvicorn,granian")
    args = parser.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    for server in [s for s in servers if not _installed(s)]:
        print(f"{server} is not installed: left out")
        servers.remove(server)
    results: dict[str, list[dict[str, float]]] = {s: [] for s in servers}
    try:
        with user_stack("postgresql") as stack, contextlib.ExitStack() as extra:
            bases = {"daphne": (stack.base, stack.roles["web"])}
            for server in servers:
                if server != "daphne":
                    bases[server] = extra.enter_context(_extra_server(stack, server))
            for server in servers:  # warm-up: imports, connection pools
                asyncio.run(events_many(dataclasses.replace(stack, base=bases[server][0]), 128, 64, "warm up"))
            for round_no in range(args.rounds):
                order = servers if round_no % 2 == 0 else list(reversed(servers))
                for server in order:
                    base, process = bases[server]
                    figures = asyncio.run(
                        _one(dataclasses.replace(stack, base=base), process, args.runs, args.sequential)
                    )
                    results[server].append(figures)
                    print(f"round {round_no + 1} {server}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()),
                          flush=True)  # fmt: skip
    except NotMeasuredError as exc:
        print(f"not measured: {exc}")
        return 1
    metrics = list(next(iter(results.values()))[0])
    print_grid(
        ["median over rounds", *servers],
        [[m, *(f"{statistics.median(r[m] for r in results[s]):.1f}" for s in servers)] for m in metrics],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
