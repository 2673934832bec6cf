"""Real processes, one set per test session (a pytest plugin of tests/conftest.py): a Celery worker
subprocess (thread pool, its own plugin runtime over stdio) and, for tests that need the web process, daphne
serving the real ASGI application, against pytest-django's test database (PostgreSQL, or SQLite's file) and a
Redis broker; and the helpers the integration, conformance and browser tests share.

Under pytest-xdist every worker has its own set: the processes get the worker's test database (pytest-django's
name, suffixed `_gw0`...), Redis database and run-cancel channel (langbot_host/settings_test.py), free ports
and temporary directories of its own.

The worker consumes a queue private to this test session, so other test sessions or a `make run` on
the same Redis never take its messages. Tests use `django_db(transaction=True)` so the worker sees
committed rows. The tests that need these processes live in `PROCESS_TEST_DIRS`; `tests/conftest.py` marks
them `integration` and skips them, with the reason, when a service is missing (and `.ci/run` fails on any
skip).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from django.conf import settings
from django.db import connections, transaction

REPO_ROOT = Path(__file__).resolve().parents[1]
PROCESS_TEST_DIRS = ("tests/integration", "tests/conformance", "tests/e2e")
BROWSER_TEST_DIRS = ("tests/e2e",)
CHROMIUM = Path("/usr/bin/chromium")
# Plugins that exist for tests only (tests/plugins/*, e.g. the intruder of the run isolation tests); the
# workers started here load them beside the configured ones.
TEST_PLUGINS_DIR = REPO_ROOT / "tests" / "plugins"

# Short leases so a killed worker is noticed within seconds.
LEASE_SECONDS = 3.0
RENEW_SECONDS = 1.0


def services_missing() -> str | None:
    """Why the process tests cannot run here, or None. PostgreSQL and SQLite both serve them: on SQLite the
    test database is a file (langbot_host/settings_test.py) that the processes started here open too."""
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        return f"integration tests need Redis at REDIS_URL ({exc})"
    return None


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not CHROMIUM.exists():
        return "the browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the browser tests need the playwright Python package (requirements-dev.txt)"
    return None


def process_tests_gate(items: list[Any]) -> None:
    """Mark the tests of `PROCESS_TEST_DIRS` `integration`, and skip every `integration` test (those marked
    by hand elsewhere too) with the reason when a service (or, for the browser tests, the browser) is
    missing."""
    missing: dict[str, str | None] = {}
    for item in items:
        path = str(item.fspath)
        if not any(part in path for part in PROCESS_TEST_DIRS) and item.get_closest_marker("integration") is None:
            continue
        item.add_marker(pytest.mark.integration)
        if "services" not in missing:
            missing["services"] = services_missing()
        reason = missing["services"]
        if reason is None and any(part in path for part in BROWSER_TEST_DIRS):
            if "browser" not in missing:
                missing["browser"] = browser_missing()
            reason = missing["browser"]
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _database_url() -> str:
    """The test database (pytest-django's, suffixed per xdist worker) as a DATABASE_URL for a child process."""
    db = connections["default"].settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    auth = quote(db["USER"] or "")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


def _host_env(celery_queue: str) -> dict[str, str]:
    """The environment of a host process started here: this test session's database, Redis, queue and
    plugins (the configured ones and the test-only ones)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "langbot_host.settings",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CELERY_TASK_DEFAULT_QUEUE": celery_queue,
        "LANGBOT_PLUGIN_DIRS": os.pathsep.join([*settings.LANGBOT_PLUGIN_DIRS, str(TEST_PLUGINS_DIR)]),
    }


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, *texts: str, timeout: float = 15) -> None:
        """Wait until the worker's log (its runtime child's included) holds every text."""
        deadline = time.monotonic() + timeout
        while not all(text in (log := self.log()) for text in texts):
            if time.monotonic() > deadline:
                missing = [text for text in texts if text not in log]
                raise AssertionError(f"not in the worker log after {timeout}s: {missing}\n{log[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL to the worker and its runtime child: nothing gets to clean up."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 30) -> None:
        """A warm shutdown, as a process manager would ask for it: SIGTERM to the worker only."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def celery_queue() -> Iterator[str]:
    from langbot_host.celery import app

    queue = f"langbot-test-{uuid.uuid4().hex[:12]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    yield queue
    app.conf.task_default_queue = previous
    with contextlib.suppress(redis.RedisError):
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)


@pytest.fixture(scope="session")
def start_worker(django_db_setup, celery_queue, tmp_path_factory) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a worker subprocess; every worker started is stopped at the end of the session."""
    started: list[WorkerProcess] = []

    def start(**extra_env: str) -> WorkerProcess:
        log_path = tmp_path_factory.mktemp("worker") / "worker.log"
        env = {
            **_host_env(celery_queue),
            "LANGBOT_RUNTIME_URL": "stdio",
            "LANGBOT_LEASE_SECONDS": str(LEASE_SECONDS),
            "LANGBOT_LEASE_RENEW_SECONDS": str(RENEW_SECONDS),
            "LANGBOT_RUN_DEADLINE_GRACE": "1",
            "LANGBOT_RUN_CANCEL_GRACE": "3",
            "LANGBOT_WORKER_SHUTDOWN_GRACE": "2",
            "LANGBOT_DB_POOL_MAX": "12",
            **extra_env,
        }
        argv = [
            sys.executable, "-m", "celery", "-A", "langbot_host", "worker", "--pool", "threads",
            "--concurrency", "4", "--without-heartbeat", "--without-gossip", "--without-mingle",
            "--loglevel", "INFO", "--hostname", f"test-{uuid.uuid4().hex[:6]}@%h",
        ]  # fmt: skip
        log = log_path.open("wb")
        process = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        deadline = time.monotonic() + 60
        while " ready." not in worker.log():
            if process.poll() is not None or time.monotonic() > deadline:
                worker.kill()
                pytest.fail(f"celery worker did not start:\n{worker.log()[-4000:]}")
            time.sleep(0.1)
        return worker

    yield start
    for worker in started:
        worker.stop()


@dataclass
class WebProcess:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def start_web(django_db_setup, celery_queue, tmp_path_factory) -> Iterator[Callable[..., WebProcess]]:
    """Start daphne on a free port (extra settings as environment variables); every web process started
    is stopped at the end of the session."""
    started: list[WebProcess] = []

    def start(**extra_env: str) -> WebProcess:
        port = _free_port()
        log_path = tmp_path_factory.mktemp("daphne") / "daphne.log"
        env = {
            **_host_env(celery_queue),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            **extra_env,
        }
        # The Procfile's web process: daphne with the host's request-read deadline (langbot_host/web.py).
        argv = [sys.executable, "-m", "langbot_host.web", "-b", "127.0.0.1", "-p", str(port)]
        argv.append("langbot_host.asgi:application")
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                argv, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        web = WebProcess(f"http://127.0.0.1:{port}", process, log_path)
        started.append(web)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return web
            if process.poll() is not None or time.monotonic() > deadline:
                web.stop()
                pytest.fail(f"daphne did not start:\n{web.log()[-4000:]}")
            time.sleep(0.1)

    yield start
    for web in started:
        web.stop()


@pytest.fixture(scope="session")
def worker(start_worker) -> WorkerProcess:
    """The worker shared by the tests that do not stop it."""
    return start_worker()


@pytest.fixture(scope="session")
def qa_report(django_db_setup) -> Any:
    """The plugin runtime's runner report, asked once per session."""
    from langbot_sdk.protocol import Action, ListAgentRunnersResponse
    from runtimes.link import runtime_link

    return ListAgentRunnersResponse.model_validate(runtime_link().call_sync(Action.LIST_AGENT_RUNNERS, {}))


QA_RUNNER_ID = "plugin:langbot/qa-runner/default"


@pytest.fixture
def qa_binding(transactional_db, qa_report) -> Callable[..., Any]:
    """Make a binding of the qa-runner (descriptors synced from the real runtime's report)."""
    from runtimes.descriptors import runner_descriptors_sync
    from tests.factories import AgentBindingFactory, WorkspaceFactory

    runner_descriptors_sync(report=qa_report)
    workspace = WorkspaceFactory.create()

    def make(**fields: Any) -> Any:
        fields.setdefault("workspace", workspace)
        fields.setdefault("runner_id", QA_RUNNER_ID)
        return AgentBindingFactory.create(**fields)

    return make


_event_counter = iter(range(1, 10**9))


def post_message(binding: Any, text: str, *, conversation_id: str = "conv-1", actor_id: str = "user-1") -> Any:
    """What the gateway does for one message event: EventLog + user transcript item + run, one transaction."""
    from runners.lifecycle.services import run_create
    from transcripts.models import EventLog, TranscriptItem

    with transaction.atomic():
        event = EventLog.objects.create(
            workspace=binding.workspace,
            event_id=f"evt-{uuid.uuid4().hex[:8]}-{next(_event_counter)}",
            event_type="message.received",
            source="api",
            conversation_id=conversation_id,
            actor={"actor_type": "user", "actor_id": actor_id},
            input={"text": text},
            input_summary=text[:100],
        )
        TranscriptItem.objects.create(
            workspace=binding.workspace,
            conversation_id=conversation_id,
            role=TranscriptItem.Role.USER,
            content=text,
            event=event,
            actor=event.actor,
        )
        return run_create(event=event, binding=binding, observer=not binding.replies)


def wait_terminal(run: Any, timeout: float = 30) -> Any:
    from runners.lifecycle.services import runs_wait

    runs_wait(run_ids=[str(run.run_id)], timeout=timeout)
    run.refresh_from_db()
    return run


def wait_status(run: Any, status: str, timeout: float = 15) -> Any:
    """Wait until a run reaches a non-terminal status (e.g. `running`); polling is fine in a test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status == status:
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run.run_id} is {run.status}, not {status}")
