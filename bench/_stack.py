"""The stack as a user starts it, for the benchmarks that measure what a user sees: `scripts/run_stack.py`
(what `make run` runs) with its Procfile processes — daphne, the Celery worker with the `make run` settings,
Celery beat and the plugin runtime over WebSocket — on a fresh database of the kind asked for, PostgreSQL
or SQLite (the embedded default). The bench process then creates a workspace, a binding and an API key in
that database and talks to the stack only through HTTP (and WebSocket).

`cpu_seconds` reads the CPU time of each process of the stack (by role), so a benchmark can say what a
run costs per process. The database and Redis servers are not counted: on the development machine they
are shared with other work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psutil

from bench._host import QA_RUNNER_ID, REPO

# Migrating a fresh database takes minutes on a loaded machine: BENCH_START_SECONDS gives it longer.
START_SECONDS = float(os.environ.get("BENCH_START_SECONDS", "180"))


class NotMeasuredError(Exception):
    """The stack could not be started or reached: the benchmark has nothing to report."""


@dataclass
class UserStack:
    database: str
    base: str
    api_key: str
    binding_id: str
    process: subprocess.Popen[bytes]
    log: Path
    roles: dict[str, psutil.Process] = field(default_factory=dict)

    @property
    def ws_base(self) -> str:
        return self.base.replace("http://", "ws://")

    @property
    def origin(self) -> str:
        return self.base

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) used so far by each process of the stack, by Procfile role."""
        used: dict[str, float] = {}
        for role, process in self.roles.items():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                children = sum(c.cpu_times().user + c.cpu_times().system for c in process.children(recursive=True))
                used[role] = times.user + times.system + children
                if role == "web":
                    # daphne's event loop thread (HTTP, ASGI, channel layer, waits); the rest is the views'
                    # threads (Django's sync views run one thread per request).
                    loop = next((t for t in process.threads() if t.id == process.pid), None)
                    if loop is not None:
                        used["web loop thread"] = loop.user_time + loop.system_time
        return used


def _free_port_pair() -> int:
    """A port whose successor is free too (the runtime listens on PORT + 1, as `make run` does); within
    BENCH_PORTS (`first-last`) when set, so that benchmarks sharing a machine keep to their own ports."""
    span = os.environ.get("BENCH_PORTS", "")
    if span:
        first, _, last = span.partition("-")
        for port in range(int(first), int(last or first), 2):
            with socket.socket() as sock, socket.socket() as probe:
                try:
                    sock.bind(("127.0.0.1", port))
                    probe.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
        raise NotMeasuredError(f"no free pair of ports in BENCH_PORTS={span}")
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise NotMeasuredError("no free pair of ports")


def database_url(kind: str) -> str:
    """A fresh database of `kind` ("postgresql" or "sqlite") for the stack, emptied now."""
    if kind == "sqlite":
        path = REPO / "var" / "bench-stack.sqlite3"
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        # BENCH_SQLITE_QUERY (e.g. `conn_max_age=600`) tries database settings without editing them.
        query = os.environ.get("BENCH_SQLITE_QUERY", "")
        return f"sqlite:///{path}" + (f"?{query}" if query else "")
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        raise NotMeasuredError("set DATABASE_URL=postgres://... to measure on PostgreSQL")
    import psycopg

    parts = urlsplit(url)
    name = f"{parts.path.strip('/') or 'langbot'}_stack"
    # BENCH_STACK_SUFFIX gives a benchmark a database of its own, so that two benchmarks of one user can
    # run at once; dropping the database waits for a checkpoint, which takes minutes on a busy machine.
    if os.environ.get("BENCH_STACK_SUFFIX"):
        name = f"{name}_{os.environ['BENCH_STACK_SUFFIX']}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        raise NotMeasuredError(f"PostgreSQL is not usable: {exc}") from exc
    return urlunsplit(parts._replace(path=f"/{name}"))


def _roles(process: subprocess.Popen[bytes]) -> dict[str, psutil.Process]:
    roles: dict[str, psutil.Process] = {}
    for child in psutil.Process(process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            line = " ".join(child.cmdline())
            if "daphne" in line or "langbot_host.web" in line:
                roles.setdefault("web", child)
            elif "celery" in line and " worker" in line:
                roles.setdefault("worker", child)
            elif "celery" in line and " beat" in line:
                roles.setdefault("beat", child)
            elif "langbot_sdk.runtime" in line:
                roles.setdefault("runtime", child)
    return roles


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(40)
    # Whatever is left of the stack (it runs in its own session, started by this process).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _setup(binding_runner: str, binding_config: dict[str, Any], policy: str) -> tuple[str, str]:
    from django.db import close_old_connections

    from bindings.services import api_key_create
    from tests.factories import AgentBindingFactory, WorkspaceFactory

    try:
        workspace = WorkspaceFactory.create(slug=f"bench-{uuid.uuid4().hex[:6]}")
        binding = AgentBindingFactory.create(
            workspace=workspace, binding_id="bench", runner_id=binding_runner, runner_config=binding_config,
            concurrency_policy=policy,
        )  # fmt: skip
        _, key = api_key_create(workspace=workspace)
        return key, binding.binding_id
    finally:
        close_old_connections()


@contextlib.contextmanager
def user_stack(
    kind: str,
    *,
    runner_id: str = QA_RUNNER_ID,
    runner_config: dict[str, Any] | None = None,
    policy: str = "parallel",
    plugin_dirs: list[Path] | None = None,
) -> Iterator[UserStack]:
    """`make run` on a fresh `kind` database, a binding to `runner_id` and an API key; stopped on exit."""
    import redis

    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        raise NotMeasuredError(f"Redis at {redis_url} is not reachable ({exc})") from exc
    url = database_url(kind)
    port = _free_port_pair()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", redis_url),
        # Its own queue, so that no other worker on this Redis takes its runs.
        "CELERY_TASK_DEFAULT_QUEUE": f"langbot-bench-{uuid.uuid4().hex[:8]}",
        "PORT": str(port),
        "NO_COLOR": "1",
        "DJANGO_SETTINGS_MODULE": "langbot_host.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(REPO / "var" / f"bench-metrics-{port}"),
    }
    if plugin_dirs:
        env["LANGBOT_PLUGIN_DIRS"] = os.pathsep.join(str(p) for p in plugin_dirs)
    Path(env["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
    suffix = os.environ.get("BENCH_STACK_SUFFIX", "")
    log = REPO / "var" / f"bench-stack-{kind}{'-' + suffix if suffix else ''}.log"
    process = subprocess.Popen(
        [sys.executable, "scripts/run_stack.py"], cwd=REPO, env=env, stdout=log.open("wb"),
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        _wait(lambda: httpx.get(f"{base}/healthz", timeout=3).status_code == 200, process, log, "/healthz")
        # This process writes the workspace, binding and key into the stack's database.
        os.environ["DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "langbot_host.settings"
        import django

        django.setup()
        # The host's logging configuration would print every request the client sends.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        key, binding_id = _setup(runner_id, runner_config or {}, policy)
        headers = {"Authorization": f"Bearer {key}"}

        def listed() -> bool:
            answer = httpx.get(f"{base}/api/v1/runners", headers=headers, timeout=5)
            return answer.status_code == 200 and runner_id in answer.text

        _wait(listed, process, log, f"{runner_id} in /api/v1/runners")
        stack = UserStack(kind, base, key, binding_id, process, log)
        stack.roles = _roles(process)
        yield stack
    finally:
        _stop(process)


def _wait(ready: Any, process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NotMeasuredError(f"`make run` stopped (status {process.returncode}); see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if ready():
                return
        time.sleep(0.3)
    raise NotMeasuredError(f"`make run` did not answer ({what}) within {START_SECONDS:.0f} s; see {log}")


# --- the client's side -------------------------------------------------------------------------------


async def event_wait(client: httpx.AsyncClient, stack: UserStack, text: str, conversation: str) -> tuple[float, str]:
    """`POST /api/v1/events?wait=10` as a user's client sends it: seconds to the answer, and the run's
    status in it (or `http <code>`)."""
    started = time.perf_counter()
    answer = await client.post(
        f"{stack.base}/api/v1/events?wait=10",
        json={"conversation_id": conversation, "input": {"text": text}},
        headers=stack.headers,
    )
    elapsed = time.perf_counter() - started
    if answer.status_code != 200:
        return elapsed, f"http {answer.status_code}"
    runs = answer.json().get("runs") or [{}]
    return elapsed, str(runs[0].get("status"))


async def events_many(
    stack: UserStack, count: int, concurrency: int, text: str
) -> tuple[list[float], dict[str, int], float]:
    """`count` events from `concurrency` clients, each waiting for its run: latencies, statuses, wall seconds."""
    import asyncio

    latencies: list[float] = []
    statuses: dict[str, int] = {}
    remaining = iter(range(count))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def one_client() -> None:
            for i in remaining:
                try:
                    elapsed, status = await event_wait(client, stack, text, f"bench-{uuid.uuid4().hex[:8]}-{i}")
                except httpx.HTTPError as exc:
                    elapsed, status = 0.0, type(exc).__name__
                if elapsed:
                    latencies.append(elapsed)
                statuses[status] = statuses.get(status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        return latencies, statuses, time.perf_counter() - started


# --- one process per database ------------------------------------------------------------------------
#
# Django is set up once per process, on one database: a benchmark measures each database in a child of its
# own (`python -m bench.<name> --only <kind>`), which prints its figures as one JSON line after ROWS_MARK.

ROWS_MARK = "BENCH-ROWS "


def rows_emit(rows: list[tuple[str, str, str]]) -> None:
    import json

    print(ROWS_MARK + json.dumps(rows), flush=True)


def measure_each(module: str, kinds: list[str], args: list[str]) -> dict[str, list[tuple[str, str, str]] | str]:
    """Per kind: the rows its child printed, or why it measured nothing."""
    import json

    results: dict[str, list[tuple[str, str, str]] | str] = {}
    for kind in kinds:
        print(f"measuring on {kind} ...", flush=True)
        child = subprocess.run(
            [sys.executable, "-m", f"bench.{module}", "--only", kind, *args], cwd=REPO, stdout=subprocess.PIPE,
            text=True, check=False,
        )  # fmt: skip
        lines = [line for line in child.stdout.splitlines() if line.startswith(ROWS_MARK)]
        if child.returncode == 0 and lines:
            results[kind] = [(str(r[0]), str(r[1]), str(r[2])) for r in json.loads(lines[-1][len(ROWS_MARK) :])]
        else:
            said = [line for line in child.stdout.splitlines() if not line.startswith(ROWS_MARK)]
            results[kind] = (said[-1] if said else "") or f"exit status {child.returncode}"
    return results


def print_by_database(results: dict[str, list[tuple[str, str, str]] | str], labels: dict[str, str]) -> int:
    """One column per database; returns the exit status (1 when any database measured nothing)."""
    from bench._report import print_grid

    measured = {k: v for k, v in results.items() if isinstance(v, list)}
    metrics: list[str] = []
    targets: dict[str, str] = {}
    values: dict[tuple[str, str], str] = {}
    for kind, rows in measured.items():
        if len({metric for metric, _, _ in rows}) != len(rows):
            raise ValueError(f"metric names repeat in the rows of {kind}; each must be unique")
        for metric, value, target in rows:
            if metric not in targets:
                metrics.append(metric)
                targets[metric] = target
            values[(kind, metric)] = value
    if metrics:
        kinds = list(measured)
        print_grid(
            ["metric", *(labels.get(k, k) for k in kinds), "target"],
            [[m, *(values.get((k, m), "-") for k in kinds), targets[m]] for m in metrics],
        )
    failed = {k: v for k, v in results.items() if isinstance(v, str)}
    for kind, why in failed.items():
        print(f"NOT MEASURED on {labels.get(kind, kind)}: {why}")
    return 1 if failed or not measured else 0
