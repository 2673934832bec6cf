"""PostgreSQL out of connections: while the server refuses every new client ("too many clients already")
and has dropped the web process's pooled ones, REST answers 503 `unavailable` with `Retry-After` (not a
500), other pages a plain 503, and `/healthz` 503 naming the database; once connections are free again the
next requests succeed and nothing stored before is lost.

The shared PostgreSQL server's limits are left alone: the test starts a private server (its own data
directory, port and a tiny `max_connections`), loads this session's test database into it, and points a
real daphne at it. The PostgreSQL server binaries are required: without them the test fails, saying so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from django.db import connections

from bindings.services import api_key_create
from tests.factories import WorkspaceFactory
from tests.processes import _free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90), pytest.mark.postgres]

MAX_CONNECTIONS = 6
POOL_TIMEOUT = "1"  # the web process's wait for a pooled connection, short so the test is quick


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        pytest.fail(
            "this test starts a private PostgreSQL server and needs its binaries (initdb, pg_ctl, pg_dump) "
            "under /usr/lib/postgresql/<version>/bin: apt-get install postgresql"
        )
    return found[-1].parent


def _as_server_user(argv: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@pytest.fixture
def api_key(transactional_db: None) -> str:
    """A workspace's API key, committed in the test database before the private server copies it."""
    return api_key_create(workspace=WorkspaceFactory.create())[1]


@pytest.fixture
def private_postgres(api_key: str) -> Iterator[str]:
    """A PostgreSQL server of this test alone holding a copy of the test database; yields its URL."""
    bin_dir = _pg_bin()
    root = Path(tempfile.mkdtemp(prefix="langbot-pg-"))
    data, log = root / "data", root / "server.log"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    port = _free_port()
    try:
        _run(_as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-N"]))
        options = (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off "
            f"-c max_connections={MAX_CONNECTIONS} -c superuser_reserved_connections=0"
        )
        _run(_as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start"]))
        url = f"postgresql://postgres@127.0.0.1:{port}/langbot"
        _run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "langbot"])
        db = connections["default"].settings_dict
        dump = subprocess.run(
            [str(bin_dir / "pg_dump"), "--no-owner", "--no-privileges", "-h", db.get("HOST") or "127.0.0.1",
             "-p", str(db.get("PORT") or 5432), "-U", db["USER"], db["NAME"]],
            check=True, capture_output=True, timeout=60, env={**os.environ, "PGPASSWORD": db.get("PASSWORD") or ""},
        )  # fmt: skip
        subprocess.run(
            [str(bin_dir / "psql"), "-q", "-v", "ON_ERROR_STOP=1", url],
            input=dump.stdout, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        yield url
    finally:
        subprocess.run(
            _as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True, timeout=30,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def _fill(url: str, held: list[psycopg.Connection]) -> None:
    """Open connections until the server refuses one: no client slot is left."""
    while True:
        try:
            held.append(psycopg.connect(url, connect_timeout=2))
        except psycopg.OperationalError as exc:
            if "too many clients" not in str(exc):
                raise
            return
        assert len(held) <= MAX_CONNECTIONS, "the server accepts more clients than max_connections"


def _until(check: Callable[[], httpx.Response], timeout: float = 15) -> httpx.Response:
    """`check()` again until it answers below 500 or `timeout` runs out; its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        response = check()
        if response.status_code < 500 or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


def test_requests_answer_503_while_postgres_has_no_connection_and_succeed_again_after(
    private_postgres: str, api_key: str, start_web
) -> None:
    url = private_postgres
    web = start_web(
        DATABASE_URL=url,
        LANGBOT_DB_POOL_MIN="1",
        LANGBOT_DB_POOL_MAX="2",
        LANGBOT_DB_POOL_TIMEOUT=POOL_TIMEOUT,
    )
    api = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=20)
    held: list[psycopg.Connection] = []
    try:
        created = api.post("/api/v1/bots", json={"bot_id": "before", "platform": "webui", "credentials": {}})
        assert created.status_code == 201, created.text
        assert _until(lambda: api.get("/healthz")).json()["checks"]["database"] == "ok"

        # Every slot taken by others, and the web process's own connections cut (as by a restart, or an
        # operator making room): nothing it holds or opens works.
        admin = psycopg.connect(url, autocommit=True)
        held.append(admin)
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        _fill(url, held)

        refused = [
            api.get("/api/v1/bots"),
            api.get("/api/v1/bots"),
            api.post("/api/v1/bots", json={"bot_id": "during", "platform": "webui", "credentials": {}}),
            api.get("/api/v1/bots"),
        ]
        for response in refused:
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"].isdigit()
            assert response.json()["error"]["code"] == "unavailable"
        # A page reading its session from the database.
        page = httpx.get(f"{web.url}/admin/", headers={"Cookie": "sessionid=" + "x" * 32}, timeout=20)
        assert page.status_code == 503, page.text[:500]
        assert page.headers["Retry-After"].isdigit()
        assert page.headers["Content-Type"].startswith("text/plain")
        health = api.get("/healthz")
        assert health.status_code == 503
        assert health.json()["checks"]["database"].startswith("error"), health.json()
    finally:
        for connection in held:
            connection.close()
    try:
        listed = _until(lambda: api.get("/api/v1/bots"))
        assert listed.status_code == 200, listed.text
        bots = listed.json()
        items = bots["items"] if isinstance(bots, dict) else bots
        assert [bot["bot_id"] for bot in items] == ["before"]
        again = api.post("/api/v1/bots", json={"bot_id": "after", "platform": "webui", "credentials": {}})
        assert again.status_code == 201, again.text
        assert _until(lambda: api.get("/healthz")).json()["checks"]["database"] == "ok"
        assert "Traceback" not in web.log(), web.log()[-3000:]
    finally:
        with contextlib.suppress(Exception):
            api.close()
        web.stop()
