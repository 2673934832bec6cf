"""Shared set-up of the host API benchmarks (`history_page`, `context_build`, `artifact_stream`): a
scratch PostgreSQL database of their own (`<name>_hostapi_bench`, recreated and migrated), Django set up
in this process, and the table every benchmark prints.

Needs DATABASE_URL=postgres://...; prints why and exits 1 otherwise (nothing measured).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def django_on_scratch_database(suffix: str) -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print("not measured: set DATABASE_URL=postgres://... (host API benchmarks need PostgreSQL)")
        sys.exit(1)
    import psycopg

    parts = urlsplit(url)
    name = f"{(parts.path.strip('/') or 'langbot')}_{suffix}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        print(f"not measured: PostgreSQL is not reachable ({exc})")
        sys.exit(1)
    os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "langbot_host.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, check=True)
    import django

    django.setup()
    # This process stands in for a worker answering host API calls, which freezes its start-up objects.
    from foundation.process import startup_objects_freeze

    startup_objects_freeze()


def drop_scratch_database() -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    parts = urlsplit(os.environ["DATABASE_URL"])
    name = parts.path.strip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def median(values: list[float]) -> float:
    return statistics.median(values)
