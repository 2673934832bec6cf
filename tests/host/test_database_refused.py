"""Which database errors mean "no connection to be had" (answered 503 and retried by clients) and which
are a query's own failure (still a 500): told apart on the errors psycopg really raises."""

from __future__ import annotations

import socket
import sqlite3

import psycopg
import pytest
from django.db import OperationalError, ProgrammingError

from foundation.db_unavailable import database_unavailable


def _as_django(exc: Exception, kind: type[Exception] = OperationalError) -> Exception:
    # How Django's backend hands psycopg's errors on: its own class, the original as the cause.
    try:
        raise kind(str(exc)) from exc
    except kind as wrapped:
        return wrapped


def test_a_server_that_refuses_the_connection_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once the socket is closed
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(host="127.0.0.1", port=port, user="nobody", dbname="x", connect_timeout=2)

    assert database_unavailable(_as_django(refused.value))


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.TooManyConnections("sorry, too many clients already"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CannotConnectNow("the database system is starting up"),
    ],
)
def test_a_server_out_of_slots_or_going_down_is_unavailable(error: Exception) -> None:
    assert database_unavailable(_as_django(error))


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    ],
)
def test_a_query_that_failed_is_not_unavailable(error: Exception) -> None:
    assert not database_unavailable(_as_django(error))


def test_errors_that_are_not_operational_are_not_unavailable() -> None:
    assert not database_unavailable(_as_django(psycopg.errors.UndefinedTable("no such table"), ProgrammingError))


def test_an_sqlite_database_locked_past_its_busy_timeout_is_unavailable(tmp_path) -> None:
    path = tmp_path / "locked.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")  # another process's writer, mid-transaction
    waiter = sqlite3.connect(path, timeout=0.05, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as locked:
            waiter.execute("INSERT INTO t VALUES (1)")
    finally:
        waiter.close()
        holder.execute("ROLLBACK")
        holder.close()

    assert database_unavailable(_as_django(locked.value))
    # A query SQLite refused for its own reasons stays the query's failure.
    broken = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.OperationalError) as no_table:
        broken.execute("SELECT * FROM missing")
    assert not database_unavailable(_as_django(no_table.value))
