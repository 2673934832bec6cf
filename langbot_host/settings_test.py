"""Test overrides: the same environment-driven settings, with fast password hashing.

Tests run against whatever DATABASE_URL and REDIS_URL point at; CI sets PostgreSQL and a Redis database
of its own.
"""

import os
import sys
import tempfile

# The counters of this test session's processes, apart from `make run`'s (var/metrics); set before the
# settings read it, and inherited by the workers and servers the tests start.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="langbot-test-metrics-"))
# Fakes of providers, platforms, MCP servers and webhook receivers listen on 127.0.0.1 in the tests (here
# and in the workers they start): the outbound guard's old host-wide name is on; the guard's own tests
# turn it off (`settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False`).
os.environ.setdefault("LANGBOT_WEBHOOK_ALLOW_PRIVATE", "true")
# The suite's stdio MCP servers are scripts run by this interpreter (here and in the workers the tests start).
os.environ.setdefault("LANGBOT_MCP_STDIO_COMMANDS", sys.executable)

from langbot_host.settings import *  # noqa: F403

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
