"""How to recognise a request that failed because the database would not give it a connection.

Three ways it happens. The web process's own pool ran dry (`pool_exhausted`). Or the server refused:
PostgreSQL has no slot left ("too many clients already"), it is restarting or down (connection refused),
or it cut a pooled connection (administrator shutdown, a restart). Or the embedded SQLite database stayed
locked by another process's writer for longer than its busy timeout. None is a bug of the request, and
the next one may well succeed: the error handlers (`foundation.api_errors`) answer both with 503
and `Retry-After` instead of a 500. A broken connection does not outlive the request: Django closes a
connection that raised such an error, and psycopg's pool discards a connection returned broken.
"""

from __future__ import annotations

import sqlite3

from django.db import InterfaceError, OperationalError

from foundation.db import pool_exhausted

# SQLSTATEs of a server that refuses or drops connections: class 08 (connection exception),
# too_many_connections, admin_shutdown, crash_shutdown, cannot_connect_now.
_REFUSED_STATES = ("08", "53300", "57P01", "57P02", "57P03")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` (as Django raises it) says no database connection could be had, rather than that a
    query was wrong."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    return pool_exhausted(exc) or _connection_refused(exc) or _sqlite_locked(exc)


def _sqlite_locked(exc: BaseException) -> bool:
    # sqlite3 gives only the message: SQLITE_BUSY after the busy timeout reads "database is locked".
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, sqlite3.OperationalError):
            return "database is locked" in str(cause)
        cause = cause.__cause__
    return False


def _connection_refused(exc: BaseException) -> bool:
    try:
        import psycopg
    except ImportError:  # SQLite only: no server to refuse
        return False
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError):
            state = cause.sqlstate
            # No SQLSTATE: psycopg's own word that the connection failed or is gone, the server never
            # answered the query.
            return state is None or state.startswith(_REFUSED_STATES)
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
