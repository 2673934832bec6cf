"""Shared set-up of the host benchmarks: a fresh PostgreSQL database, a Celery worker subprocess with its
own plugin runtime, a workspace bound to the qa-runner, and a driver that ingests events through the
gateway service (`gateway.services.event_ingest`, i.e. without HTTP) and waits for each run's
terminal `run.status` on the channel layer — the same path `?wait=`, SSE and WebSocket clients use.

Measured "host overhead" = from calling the gateway service to receiving the run's terminal status:
EventLog + transcript + resolver + run row, broker, claim + context build, runtime round trip,
result persistence and publication. The qa `ok` runner itself takes microseconds.

Needs DATABASE_URL=postgres://... and Redis at REDIS_URL; prints why and exits 1 otherwise (nothing measured).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
QA_RUNNER_ID = "plugin:langbot/qa-runner/default"
WAIT_SECONDS = 60.0


def environment_or_exit() -> dict[str, str]:
    """The environment of the bench database; exits 1 with a message when services are missing."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print("not measured: set DATABASE_URL=postgres://... (host benchmarks need PostgreSQL and Redis)")
        sys.exit(1)
    import redis

    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        print(f"not measured: Redis at {redis_url} is not reachable ({exc})")
        sys.exit(1)
    parts = urlsplit(url)
    bench_url = urlunsplit(parts._replace(path=f"{parts.path.rstrip('/') or '/langbot'}_bench"))
    return {
        "DATABASE_URL": bench_url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", redis_url),
        "CELERY_TASK_DEFAULT_QUEUE": f"langbot-bench-{uuid.uuid4().hex[:8]}",
        "DJANGO_SETTINGS_MODULE": "langbot_host.settings",
        "LOG_LEVEL": "WARNING",
        "LANGBOT_DB_POOL_MAX": os.environ.get("LANGBOT_DB_POOL_MAX", "40"),
    }


def recreate_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, check=True)


@contextmanager
def host(worker_env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Fresh database, Django set up in this process, one worker subprocess (stopped on exit)."""
    env = environment_or_exit()
    os.environ.update(env)
    recreate_database(env["DATABASE_URL"])
    import django

    django.setup()
    from langbot_host.celery import app

    app.conf.task_default_queue = env["CELERY_TASK_DEFAULT_QUEUE"]
    (REPO / "var").mkdir(exist_ok=True)
    log = open(REPO / "var" / "bench-worker.log", "wb")  # noqa: SIM115
    argv = [
        sys.executable, "-m", "celery", "-A", "langbot_host", "worker", "--pool", "threads", "--concurrency", "8",
        "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "WARNING",
    ]  # fmt: skip
    # Same process group as the bench: `python -m bench` ends both if the bench times out.
    worker = subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, **(worker_env or {})}, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _setup_binding()
        # This process stands in for the web process, which freezes its start-up objects (asgi.py).
        from foundation.process import startup_objects_freeze

        startup_objects_freeze()
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
        from runtimes.link import runtime_link_reset

        runtime_link_reset()


def _setup_binding() -> None:
    from langbot_sdk.protocol import Action, ListAgentRunnersResponse
    from runtimes.descriptors import runner_descriptors_sync
    from runtimes.link import runtime_link
    from tests.factories import AgentBindingFactory, WorkspaceFactory

    report = ListAgentRunnersResponse.model_validate(runtime_link().call_sync(Action.LIST_AGENT_RUNNERS, {}))
    runner_descriptors_sync(report=report)
    workspace = WorkspaceFactory.create(slug="bench")
    AgentBindingFactory.create(workspace=workspace, binding_id="bench", runner_id=QA_RUNNER_ID)


class Driver:
    """Ingests events and waits, per run, for its terminal status.

    Each waiting client listens on a process-local channel of its own, as `runs_wait` (`?wait=`) does:
    the host's layer reads every waiting message of the process in one round trip
    (`runners.live.layers.BatchedRedisChannelLayer`), which a plain channel name would bypass.
    """

    def __init__(self) -> None:
        from channels.layers import get_channel_layer

        self.layer = get_channel_layer()
        self.workspace: Any = None
        # run id -> wall-clock times of the gateway call, its return and the client's receipt of the end
        # (comparable with the Run row's `started_at`/`finished_at`, written by the worker on this machine).
        self.marks: dict[str, tuple[float, float, float]] = {}

    async def start(self) -> None:
        from asgiref.sync import sync_to_async

        self.workspace = await sync_to_async(_workspace, thread_sensitive=False)()

    async def _terminal(self, channel: str, run_id: str) -> str:
        terminal = {"completed", "failed", "cancelled", "timeout"}
        while True:
            message = await self.layer.receive(channel)
            if str(message.get("run_id")) != run_id:
                continue
            event = message.get("event") or {}
            if message.get("type") == "run.status" and message.get("status") in terminal:
                return str(message["status"])
            if message.get("type") == "run.event" and event.get("type") in {"run.completed", "run.failed"}:
                # Committed with the final status and published just before it (see runs_wait).
                return "completed" if event["type"] == "run.completed" else "failed"

    async def run_one(self, text: str, conversation: str) -> tuple[float, str]:
        """Seconds from the gateway call to the terminal status, and that status."""
        from asgiref.sync import sync_to_async

        started, called = time.perf_counter(), time.time()
        run_id, _ = await sync_to_async(_ingest, thread_sensitive=False)(self.workspace, text, conversation)
        ingested = time.time()
        channel = await self.layer.new_channel()
        # Subscribe, then read the status once: a run that ended in between is not missed.
        await self.layer.group_add(f"run.{run_id}", channel)
        try:
            now_status = await sync_to_async(_status, thread_sensitive=False)(run_id)
            if now_status in {"completed", "failed", "cancelled", "timeout"}:
                result = now_status
            else:
                try:
                    result = await asyncio.wait_for(self._terminal(channel, run_id), WAIT_SECONDS)
                except TimeoutError:
                    # A status message can be dropped when a channel is full: read once.
                    result = await sync_to_async(_status, thread_sensitive=False)(run_id)
            self.marks[run_id] = (called, ingested, time.time())
            return time.perf_counter() - started, result
        finally:
            await self.layer.group_discard(f"run.{run_id}", channel)

    async def stop(self) -> None:
        pass


def _workspace() -> Any:
    from django.db import close_old_connections

    from bindings.models import Workspace

    try:
        return Workspace.objects.get(slug="bench")
    finally:
        close_old_connections()


def _ingest(workspace: Any, text: str, conversation: str) -> tuple[str, str]:
    from django.db import close_old_connections

    from gateway.envelope import EventEnvelopeIn
    from gateway.services import event_ingest

    try:
        envelope = EventEnvelopeIn.model_validate({"conversation_id": conversation, "input": {"text": text}})
        result = event_ingest(workspace=workspace, envelope=envelope)
        [run] = result.runs
        return str(run.run_id), run.status
    finally:
        close_old_connections()


def run_stages(marks: dict[str, tuple[float, float, float]]) -> dict[str, list[float]]:
    """Where each run's time went, in seconds, from the driver's marks and the Run row's timestamps:
    the gateway call (EventLog, transcript, run row, broker publish); from its return to the worker's
    claim (broker, Celery, run load); from the claim to the run's end (context, claim update, runtime round
    trip, result normalization); from there to the client's receipt (ledger end, publication, channel
    layer). `started_at` is taken just after the run is loaded and `finished_at` when the worker takes the
    terminal result, before writing it."""
    from django.db import close_old_connections

    from runners.models import Run

    try:
        rows = Run.objects.filter(run_id__in=list(marks)).values_list("run_id", "started_at", "finished_at")
        stages: dict[str, list[float]] = {"gateway call": [], "to claim": [], "claim to end": [], "to receipt": []}
        for run_id, started_at, finished_at in rows:
            if started_at is None or finished_at is None:
                continue
            called, ingested, received = marks[str(run_id)]
            stages["gateway call"].append(ingested - called)
            stages["to claim"].append(started_at.timestamp() - ingested)
            stages["claim to end"].append(finished_at.timestamp() - started_at.timestamp())
            stages["to receipt"].append(received - finished_at.timestamp())
        return stages
    finally:
        close_old_connections()


def _status(run_id: str) -> str:
    from django.db import close_old_connections, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM runners_run WHERE run_id = %s", [run_id])
            return str(cursor.fetchone()[0])
    finally:
        close_old_connections()


async def run_many(driver: Driver, count: int, concurrency: int, text: str) -> tuple[list[float], dict[str, int]]:
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def client() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            elapsed, status = await driver.run_one(text, f"bench-{uuid.uuid4().hex[:8]}-{i}")
            latencies.append(elapsed)
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies, statuses


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def ensure_threads(n: int) -> None:
    """Enough executor threads for the bench's sync_to_async(thread_sensitive=False) calls."""
    from concurrent.futures import ThreadPoolExecutor

    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=n))
