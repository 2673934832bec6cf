"""Test overrides: the same environment-driven settings, with fast password hashing, and what keeps parallel
test processes (pytest-xdist workers, `make test`) apart.

Tests run against whatever DATABASE_URL and REDIS_URL point at; CI sets PostgreSQL and a Redis database
of its own. Under pytest-xdist each worker (`PYTEST_XDIST_WORKER`, gw0, gw1, ...) gets, and hands to the
processes it starts through the environment:

- its own test database: pytest-django suffixes the test database's name with the worker id
  (`test_langbot_ci_gw0`); on SQLite the test database is a file (below), so the worker, daphne and Celery
  processes a test starts all open the same one;
- its own Redis database: REDIS_URL's database number plus 10 plus the worker's number (REDIS_URL `.../1`
  gives gw0 database 11 and gw1 database 12; the default `.../0` gives 10 and 11), since the cache, the
  throttles and the channel layer's groups are keyed by values that repeat from one test database to another;
- its own run-cancel channel (Redis pub/sub channels are not per database) and Prometheus directory.
"""

import atexit
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import environ

REDIS_WORKER_DB_OFFSET = 10
REDIS_DATABASES = 16  # Redis' default `databases`


def _worker_redis_url(url: str, worker: str) -> str:
    """REDIS_URL of xdist worker `gwN`: the same server, database base + 10 + N."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    db = base + REDIS_WORKER_DB_OFFSET + int(re.sub(r"\D", "", worker) or 0)
    if db >= REDIS_DATABASES:
        raise RuntimeError(
            f"xdist worker {worker} would use Redis database {db} (REDIS_URL {url}): Redis has {REDIS_DATABASES}; "
            "use fewer workers (-n) or a lower database number in REDIS_URL"
        )
    return urlunsplit(parts._replace(path=f"/{db}"))


# The settings read .env too; its REDIS_URL is the base the workers' databases are derived from.
if (Path(__file__).resolve().parent.parent / ".env").exists():
    environ.Env.read_env(Path(__file__).resolve().parent.parent / ".env", overwrite=False)

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# Applied once per test process: the processes a test starts inherit the environment, and one of them that
# reads these settings again (a `manage.py` child) must not derive a second time.
if os.environ.get("LANGBOT_TEST_ENV_FOR") != _WORKER:
    os.environ["LANGBOT_TEST_ENV_FOR"] = _WORKER
    # The counters of this test process's own processes, apart from `make run`'s (var/metrics) and from the
    # other xdist workers' (a test reading a counter sees its own processes' only).
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix=f"langbot-test-metrics-{_WORKER or 'main'}-")
    if _WORKER:
        os.environ["REDIS_URL"] = _worker_redis_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), _WORKER)
        os.environ["LANGBOT_RUN_CANCEL_CHANNEL"] = f"langbot:runs:cancel:{_WORKER}"
# Fakes of providers, platforms, MCP servers and webhook receivers listen on 127.0.0.1 in the tests (here
# and in the workers they start): the outbound guard's old host-wide name is on; the guard's own tests
# turn it off (`settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False`).
os.environ.setdefault("LANGBOT_WEBHOOK_ALLOW_PRIVATE", "true")
# The suite's stdio MCP servers are scripts run by this interpreter (here and in the workers the tests start).
os.environ.setdefault("LANGBOT_MCP_STDIO_COMMANDS", sys.executable)

from langbot_host.settings import *  # noqa: E402, F403

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, not Django's default in-memory test database: the worker, daphne and runtime processes the
    # integration tests start must open the test's database, and an in-memory one lives in this process only.
    # In RAM where the system has a tmpfs for it (/dev/shm), so the file costs no disk writes.
    _shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    _sqlite_dir = tempfile.mkdtemp(prefix="langbot-test-db-", dir=_shm)
    atexit.register(shutil.rmtree, _sqlite_dir, ignore_errors=True)
    # pytest-django appends the xdist worker's id to this name (`..._gw0`).
    DATABASES["default"].setdefault("TEST", {})["NAME"] = os.path.join(_sqlite_dir, "test_langbot.sqlite3")  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Static files are collected by `make run`, not by the test run.
MIDDLEWARE = [m for m in MIDDLEWARE if not m.startswith("whitenoise.")]  # noqa: F405
# The test process imports the ASGI application (tests/streaming): its own objects are not frozen unless a
# test asks for it (tests/host/test_process_startup.py).
LANGBOT_GC_FREEZE = env.bool("LANGBOT_GC_FREEZE", default=False)  # noqa: F405
