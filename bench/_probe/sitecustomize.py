"""Bench-only counters for the processes of a profiled stack (`bench/profile_run.py`): SQL statements and
Redis round trips per process, with what they were.

`bench/profile_run.py` puts this directory on PYTHONPATH with BENCH_PROBE_DIR set, so every Python process of
the stack imports it at start-up (Python's `sitecustomize` hook). Without BENCH_PROBE_DIR it does nothing.
It wraps psycopg's cursor `execute` (every statement Django sends) and redis-py's `send_packed_command`
(sync and asyncio: one call is one write to the server, so a pipeline counts once), and writes the counts to
`BENCH_PROBE_DIR/<pid>.json` twice a second. No host code changes for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
from collections import Counter

_DIR = os.environ.get("BENCH_PROBE_DIR", "")
_REDIS_COMMAND = re.compile(rb"\*\d+\r\n\$\d+\r\n([A-Za-z]+)\r\n")
_lock = threading.Lock()
_counts: Counter[str] = Counter()


def _count(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def _sql_kind(query: object) -> str:
    text = query.decode() if isinstance(query, bytes) else str(query)
    words = text.split(None, 1)
    head = words[0].upper() if words else "?"
    # A statement's shape without its values, short enough to group by.
    shape = re.sub(r"\s+", " ", re.sub(r"\"s\d+_x\d+\"", '"s…"', text))[:110]
    return f"{head}|{shape}"


def _wrap_psycopg() -> None:
    import psycopg

    for cls in (psycopg.Cursor, psycopg.AsyncCursor):
        execute = cls.execute
        executemany = cls.executemany

        if cls is psycopg.Cursor:

            def wrapped(self, query, params=None, *a, __f=execute, **kw):
                _count("sql")
                _count("sql " + _sql_kind(query if isinstance(query, str | bytes) else repr(query)))
                return __f(self, query, params, *a, **kw)

            def wrapped_many(self, query, params_seq, *a, __f=executemany, **kw):
                _count("sql")
                _count("sql " + _sql_kind(query if isinstance(query, str | bytes) else repr(query)))
                return __f(self, query, params_seq, *a, **kw)

        else:

            async def wrapped(self, query, params=None, *a, __f=execute, **kw):
                _count("sql")
                _count("sql " + _sql_kind(query if isinstance(query, str | bytes) else repr(query)))
                return await __f(self, query, params, *a, **kw)

            async def wrapped_many(self, query, params_seq, *a, __f=executemany, **kw):
                _count("sql")
                _count("sql " + _sql_kind(query if isinstance(query, str | bytes) else repr(query)))
                return await __f(self, query, params_seq, *a, **kw)

        cls.execute = wrapped  # type: ignore[method-assign]
        cls.executemany = wrapped_many  # type: ignore[method-assign]


def _redis_names(command: object) -> list[str]:
    if isinstance(command, bytes | bytearray | memoryview):
        data = bytes(command)
    elif isinstance(command, list | tuple):
        data = b"".join(bytes(c) for c in command)
    else:
        return ["?"]
    return [m.decode().upper() for m in _REDIS_COMMAND.findall(data)] or ["?"]


def _wrap_redis() -> None:
    import redis.asyncio.connection as aconn
    import redis.connection as conn

    sync_send = conn.AbstractConnection.send_packed_command

    def send(self, command, check_health=True):
        names = _redis_names(command)
        _count("redis")
        _count("redis " + "+".join(sorted(set(names))))
        return sync_send(self, command, check_health)

    conn.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]

    async_send = aconn.AbstractConnection.send_packed_command

    async def asend(self, command, check_health=True):
        names = _redis_names(command)
        _count("redis")
        _count("redis " + "+".join(sorted(set(names))))
        return await async_send(self, command, check_health)

    aconn.AbstractConnection.send_packed_command = asend  # type: ignore[method-assign]


def _writer() -> None:
    path = os.path.join(_DIR, f"{os.getpid()}.json")
    event = threading.Event()
    while not event.wait(0.5):
        with _lock:
            snapshot = dict(_counts)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as out:
            json.dump({"argv": sys.argv, "counts": snapshot}, out)
        os.replace(tmp, path)


if _DIR:
    with contextlib.suppress(ImportError):
        _wrap_psycopg()
    with contextlib.suppress(ImportError):
        _wrap_redis()
    threading.Thread(target=_writer, name="bench-probe", daemon=True).start()
