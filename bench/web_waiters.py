"""Waiting clients held by one web process: N `POST /events?wait=` requests plus N SSE run streams, all on
qa `slow` runs at once, against daphne with its default database pool (20). Reports whether every one got
its run's end, what the web process's RSS and thread count were before and with them, and how another
workspace's `GET /runs` and `/healthz` answered meanwhile.

Real processes, as `make run` starts them: daphne and a Celery worker with its plugin runtime (bench/_stream.py).
Usage: `python -m bench.web_waiters [--waiters N] [--sleep S]` (N of each kind; default 250 and 20 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field

import httpx
import psutil

from bench._report import print_table
from bench._stream import Stack, stack

MIB = 1024 * 1024
RAMP_SECONDS = 0.01
WEB_POOL = "20"  # the settings' default LANGBOT_DB_POOL_MAX, for the web process and the worker alike


@dataclass
class Held:
    waited: list[str] = field(default_factory=list)
    streamed: list[str] = field(default_factory=list)
    rss_peak: int = 0
    threads_peak: int = 0
    most_running: int = 0
    probe_ms: dict[str, list[float]] = field(default_factory=lambda: {"/healthz": [], "GET /runs": []})
    probe_failures: list[str] = field(default_factory=list)


def _web_process() -> psutil.Process:
    for child in psutil.Process().children(recursive=True):
        if "daphne" in " ".join(child.cmdline()):
            return child
    raise SystemExit("no daphne process among this benchmark's children")


def _workspace_with_qa_binding(slug: str) -> str:
    from bindings.services import api_key_create
    from tests.factories import AgentBindingFactory, WorkspaceFactory

    workspace = WorkspaceFactory.create(slug=slug)
    AgentBindingFactory.create(workspace=workspace, runner_id="plugin:langbot/qa-runner/default")
    _, key = api_key_create(workspace=workspace)
    return key


def _running() -> int:
    from django.db import close_old_connections

    from runners.models import Run

    try:
        return Run.objects.filter(workspace__slug="waiters", status=Run.Status.RUNNING).count()
    finally:
        close_old_connections()


async def _wait(http: httpx.AsyncClient, key: str, text: str, wait: float, delay: float = 0) -> str:
    await asyncio.sleep(delay)
    body = {"conversation_id": f"wait-{uuid.uuid4().hex}", "input": {"text": text}}
    response = await http.post(f"/api/v1/events?wait={wait:g}", json=body, headers=_auth(key))
    if response.status_code not in (200, 202):  # 200: the run ended within the wait
        return f"HTTP {response.status_code}"
    return str(response.json()["runs"][0]["status"])


async def _stream(http: httpx.AsyncClient, key: str, text: str, delay: float = 0) -> str:
    await asyncio.sleep(delay)
    body = {"conversation_id": f"sse-{uuid.uuid4().hex}", "input": {"text": text}}
    response = await http.post("/api/v1/events", json=body, headers=_auth(key))
    if response.status_code != 202:
        return f"HTTP {response.status_code}"
    run_id = response.json()["runs"][0]["run_id"]
    async with http.stream("GET", f"/api/v1/runs/{run_id}/stream", headers=_auth(key)) as stream:
        if stream.status_code != 200:
            return f"SSE HTTP {stream.status_code}"
        async for line in stream.aiter_lines():
            if line in ("event: run.completed", "event: run.failed"):
                return line.removeprefix("event: ")
    return "ended early"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _probe(http: httpx.AsyncClient, held: Held, other_key: str) -> None:
    for name, path, headers in (("/healthz", "/healthz", {}), ("GET /runs", "/api/v1/runs?limit=5", _auth(other_key))):
        started = time.perf_counter()
        try:
            response = await http.get(path, headers=headers, timeout=15)
        except httpx.HTTPError as exc:
            held.probe_failures.append(f"{name}: {type(exc).__name__}")
            continue
        if response.status_code != 200:
            held.probe_failures.append(f"{name}: HTTP {response.status_code}")
        held.probe_ms[name].append((time.perf_counter() - started) * 1000)


async def measure(stack: Stack, waiters: int, sleep: float) -> tuple[list[tuple[str, str, str]], bool]:
    from asgiref.sync import sync_to_async

    key = await sync_to_async(_workspace_with_qa_binding, thread_sensitive=False)("waiters")
    other_key = await sync_to_async(_workspace_with_qa_binding, thread_sensitive=False)("waiters-other")
    web = _web_process()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=stack.base, limits=limits, timeout=sleep + 120) as http:
        # Warm up: the web process's first ?wait=, SSE stream and health check (it starts its runtime child).
        await _wait(http, key, "qa:ok warm", 30)
        await _stream(http, key, "qa:ok warm")
        await http.get("/healthz")
        await asyncio.sleep(1)
        rss_idle, threads_idle = web.memory_info().rss, web.num_threads()

        held = Held()
        text = f"qa:slow:{sleep:g} held"
        started = time.perf_counter()
        # Clients arrive over a few seconds (RAMP_SECONDS apart), not in one instant: daphne listens with
        # Twisted's backlog of 50, and 500 connections opened at once overflow it (the kernel drops some).
        tasks = [asyncio.create_task(_wait(http, key, text, sleep + 60, 2 * n * RAMP_SECONDS)) for n in range(waiters)]
        tasks += [asyncio.create_task(_stream(http, key, text, (2 * n + 1) * RAMP_SECONDS)) for n in range(waiters)]
        all_held_after = None
        while not all(t.done() for t in tasks):
            running = await sync_to_async(_running, thread_sensitive=False)()
            held.most_running = max(held.most_running, running)
            if running == 2 * waiters:
                all_held_after = all_held_after or time.perf_counter() - started
            held.rss_peak = max(held.rss_peak, web.memory_info().rss)
            held.threads_peak = max(held.threads_peak, web.num_threads())
            await _probe(http, held, other_key)
            await asyncio.sleep(0.5)
        held.waited = list(await asyncio.gather(*tasks[:waiters]))
        held.streamed = list(await asyncio.gather(*tasks[waiters:]))

    total = 2 * waiters
    per_waiter = (held.rss_peak - rss_idle) / total
    completed_waits = held.waited.count("completed")
    completed_streams = held.streamed.count("run.completed")

    def median_ms(name: str) -> str:
        values = held.probe_ms[name]
        return f"{statistics.median(values):.0f} ms (max {max(values):.0f}, n={len(values)})" if values else "-"

    rows = [
        ("web process database pool (LANGBOT_DB_POOL_MAX)", os.environ["LANGBOT_DB_POOL_MAX"], "-"),
        ("?wait= requests answered with their run completed", f"{completed_waits}/{waiters}", "all"),
        ("SSE streams that saw run.completed", f"{completed_streams}/{waiters}", "all"),
        ("runs running at once (all waited on)", f"{held.most_running}/{total}", f"{total}"),
        ("all held after", f"{all_held_after:.1f} s" if all_held_after else "never", "-"),
        ("web RSS idle", f"{rss_idle / MIB:.0f} MiB", "-"),
        (f"web RSS with {total} waiters (peak)", f"{held.rss_peak / MIB:.0f} MiB", "-"),
        ("web RSS per waiter", f"{per_waiter / 1024:.0f} KiB", "-"),
        ("web threads idle / with waiters", f"{threads_idle} / {held.threads_peak}", "-"),
        ("/healthz meanwhile (median)", median_ms("/healthz"), "200, prompt"),
        ("another workspace's GET /runs meanwhile (median)", median_ms("GET /runs"), "200, prompt"),
        ("failed requests meanwhile", str(len(held.probe_failures)), "0"),
    ]
    if held.probe_failures:
        print(f"failed meanwhile: {held.probe_failures[:5]}")
    failures = [w for w in held.waited if w != "completed"] + [s for s in held.streamed if s != "run.completed"]
    if failures:
        print(f"{len(failures)} waiter(s) did not get their run's end: {failures[:5]}")
    return rows, completed_waits + completed_streams > 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--waiters", type=int, default=250, help="?wait= requests, and as many SSE streams")
    parser.add_argument("--sleep", type=float, default=20.0, help="seconds each qa slow run lasts")
    args = parser.parse_args()
    os.environ["LANGBOT_DB_POOL_MAX"] = os.environ.get("LANGBOT_DB_POOL_MAX", WEB_POOL)
    with stack() as running:
        rows, measured = asyncio.run(measure(running, args.waiters, args.sleep))
    print_table(rows)
    # A missed target is reported, not failed; no measurement at all is.
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
