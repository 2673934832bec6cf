"""Database access from the worker's event loop, and the plain-SQL helpers of the run hot path.

ORM calls run on a small dedicated thread pool (`LANGBOT_WORKER_DB_THREADS`) rather than asgiref's
single thread-sensitive thread, so the runs of one process write concurrently; each call hands its
connection back (to the PostgreSQL pool when it is configured) so idle threads hold nothing.

A running run's result writes (`ledger.py`) need no ORM in the common case: `LoopStatements` runs them
on the loop itself, over psycopg's async connections on PostgreSQL, without handing each one to a
thread and back.

Claiming a run and persisting its results happen for every run, so they use hand-written statements
instead of building ORM queries each time (query compilation costs more than the round trip on a small
machine). `ModelColumns` keeps those statements tied to the models: the column lists come from the
model's own fields, values are prepared by the fields (`prep`, `insert_values`) and rows are turned back
into model instances with the fields' own converters, so JSON, UUID and encrypted fields behave as with the
ORM. New rows go in with `insert`, `insert_with_children` and, inside larger statements, `insert_select_sql`.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast

from django.db import close_old_connections, connection, transaction
from django.db.models import Model

P = ParamSpec("P")
T = TypeVar("T")
M = TypeVar("M", bound=Model)


class DatabaseExecutor:
    def __init__(self, threads: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="langbot-run-db")

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(_call, fn, *args, **kwargs))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()


class LoopStatements:
    """Hand-written statements awaited on the worker's loop.

    On PostgreSQL they run over a pool of psycopg async connections opened with Django's own connection
    parameters (so values load as through the ORM: the same adapters, JSON as text for the fields to
    decode), in autocommit, prepared on the server in their `$n` form like `sql_fetchall`. Each one costs
    its round trip and no thread hand-off. Elsewhere (SQLite) they go through `sql_fetchall` on the
    executor. Errors are the driver's own, not Django's wrappers.
    """

    def __init__(self, executor: DatabaseExecutor, size: int) -> None:
        self.executor = executor
        self.size = max(1, size)
        self._pool: Any = None

    @property
    def native(self) -> bool:
        return connection.vendor == "postgresql"

    async def open(self) -> None:
        if not self.native or self._pool is not None:
            return
        from psycopg_pool import AsyncConnectionPool

        params = connection.get_connection_params()
        params.pop("cursor_factory", None)  # Django's is a synchronous cursor
        self._pool = AsyncConnectionPool(
            kwargs={**params, "autocommit": True},
            min_size=1,
            max_size=self.size,
            open=False,
            name="langbot-run-statements",
        )
        await self._pool.open()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def fetchall(self, statement: Statement) -> list[tuple[Any, ...]]:
        if not self.native:
            return await self.executor(statement.fetchall)
        if self._pool is None:
            raise RuntimeError("the loop's statement pool is not open")
        import psycopg

        async with self._pool.connection() as conn, psycopg.AsyncRawCursor(conn) as cursor:
            await cursor.execute(_numbered(statement.sql), statement.params, prepare=True)
            return [tuple(row) for row in await cursor.fetchall()]


def qn(name: str) -> str:
    return connection.ops.quote_name(name)


def table(model: type[Model]) -> str:
    return qn(model._meta.db_table)


def column(model: type[Model], field_name: str) -> str:
    return qn(cast(Any, model._meta.get_field(field_name)).column)


def sql_text_literals(values: Sequence[str]) -> str:
    """Constant strings written into a statement as SQL literals, for a condition that must match a
    partial index's predicate: a generic plan cannot prove the predicate from a parameter."""
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


def prep(model: type[Model], field_name: str, value: Any) -> Any:
    """`value` as the database driver takes it for `model.field_name` (JSON, UUID, datetimes...)."""
    return cast(Any, model._meta.get_field(field_name)).get_db_prep_save(value, connection)


class ModelColumns(Generic[M]):
    """The concrete columns of `model` under a table alias, and the way back from a row to an instance.

    Fields named in `defer` are left out of the statement; the instances have them deferred, as with
    `QuerySet.defer()`, so reading one costs a query of its own."""

    def __init__(self, model: type[M], alias: str, *, defer: Sequence[str] = ()) -> None:
        self.model = model
        self.alias = alias
        self.fields: list[Any] = [f for f in model._meta.concrete_fields if f.name not in defer]
        self.attnames = [f.attname for f in self.fields]
        self.pk_index = self.fields.index(model._meta.pk)
        self._cols = [f.get_col(alias) for f in self.fields]
        self._converters: dict[str, list[list[Callable[..., Any]]]] = {}

    @property
    def select(self) -> str:
        return ", ".join(f"{qn(self.alias)}.{qn(f.column)}" for f in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def _field_converters(self) -> list[list[Callable[..., Any]]]:
        key = connection.vendor
        if key not in self._converters:
            self._converters[key] = [
                connection.ops.get_db_converters(col) + f.get_db_converters(connection)
                for f, col in zip(self.fields, self._cols, strict=True)
            ]
        return self._converters[key]

    def load(self, values: Sequence[Any]) -> M | None:
        """The instance of a row slice, or None when the row has no such object (an outer join)."""
        if values[self.pk_index] is None:
            return None
        converted = []
        for col, converters, value in zip(self._cols, self._field_converters(), values, strict=True):
            for converter in converters:
                value = converter(value, col, connection)
            converted.append(value)
        return self.model.from_db(connection.alias, self.attnames, converted)


@functools.lru_cache(maxsize=512)
def _numbered(sql: str) -> str:
    """`sql` with its `%s` placeholders written as PostgreSQL's own `$1, $2, ...`. psycopg converts
    `%s` itself, but caches that only for statements under 4 KiB with at most 50 parameters; the hot path's
    statements (the claim's join, the gateway's and the ledger's CTEs) are longer, and parsing them on
    every execution cost more than a tenth of the gateway's CPU."""
    numbers = iter(range(1, sql.count("%s") + 1))
    numbered = re.sub(r"%s", lambda _: f"${next(numbers)}", sql)
    if "%" in numbered:
        raise ValueError("hot-path statements take %s placeholders only")
    return numbered


def _execute(sql: str, params: Sequence[Any], prepare: bool, binary: bool = False) -> Any:
    """Execute on the current connection and return the cursor (the caller closes it). On PostgreSQL,
    hot statements run with server-side binding and are prepared once per connection (planning a wide
    join costs more than executing it), from a raw cursor fed the `$n` form of the statement."""
    connection.ensure_connection()
    cursor: Any
    if prepare and connection.vendor == "postgresql":
        import psycopg

        cursor = psycopg.RawCursor(connection.connection)
        statement, options = _numbered(sql), {"prepare": True, "binary": binary}
    else:
        cursor = connection.cursor()
        statement, options = sql, {}
    try:
        cursor.execute(statement, params, **options)
    except BaseException:
        cursor.close()
        raise
    return cursor


@dataclass(frozen=True)
class Statement:
    """A hand-written statement and its parameters, built together by one function of an app's SQL seam
    (`bindings/sql.py`, `transcripts/sql.py`, `runners/sql.py`), so no positional list is assembled far
    from the text it fills. `tests/execution/test_sql_seams.py` renders every one into a file a reviewer
    reads (`tests/execution/sql_seams.txt`)."""

    sql: str
    params: Sequence[Any]
    prepare: bool = True
    binary: bool = False

    def fetchall(self) -> list[tuple[Any, ...]]:
        return sql_fetchall(self.sql, self.params, prepare=self.prepare, binary=self.binary)

    def fetchone(self) -> tuple[Any, ...] | None:
        return sql_fetchone(self.sql, self.params, prepare=self.prepare)

    def execute(self) -> int:
        return sql_execute(self.sql, self.params, prepare=self.prepare)


def sql_fetchone(sql: str, params: Sequence[Any], *, prepare: bool = True) -> tuple[Any, ...] | None:
    with connection.wrap_database_errors, _execute(sql, params, prepare) as cursor:
        row = cursor.fetchone()
        return tuple(row) if row is not None else None


def sql_fetchall(
    sql: str, params: Sequence[Any], *, prepare: bool = True, binary: bool = False
) -> list[tuple[Any, ...]]:
    """All rows of a statement. With `binary` (PostgreSQL, prepared), values come in the server's binary
    format through psycopg's own loaders, which decode timestamps far faster than Django's text loader;
    JSON then arrives decoded, not as the text a model field's converters expect, so `binary` is for
    rows read without them."""
    with connection.wrap_database_errors, _execute(sql, params, prepare, binary) as cursor:
        return [tuple(row) for row in cursor.fetchall()]


def sql_execute(sql: str, params: Sequence[Any], *, prepare: bool = True) -> int:
    """Run a statement; returns the number of rows it changed."""
    with connection.wrap_database_errors, _execute(sql, params, prepare) as cursor:
        return int(cursor.rowcount)


@functools.cache
def _insert_sql(model: type[Model], vendor: str, skip_conflicts: bool) -> str:
    fields = _insert_fields(model)
    pk = cast(Any, model._meta.pk).column
    return (
        f"INSERT INTO {table(model)} ({', '.join(qn(f.column) for f in fields)})"
        f" VALUES ({', '.join(['%s'] * len(fields))})"
        f"{' ON CONFLICT DO NOTHING' if skip_conflicts else ''} RETURNING {qn(pk)}"
    )


def _insert_fields(model: type[Model]) -> list[Any]:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def insert_values(obj: Model, *, link: str | None = None) -> list[Any]:
    """The parameters of a new row of `obj` (fields' `pre_save` and database preparation, as `save()`),
    in the column order of `insert()` and `insert_select_sql()`; without the `link` field."""
    return [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in _insert_fields(type(obj)) if f.name != link]


def _cast_type(field: Any) -> str:
    # Without length modifiers: an explicit cast to varchar(n) would truncate silently, where the
    # assignment to the column refuses an over-long value as a plain INSERT does.
    return re.sub(r"\(.*\)", "", field.db_type(connection))


def insert_select_sql(model: type[Model], source: str, *, link: str | None = None, link_column: str = "") -> str:
    """`INSERT INTO <model> (...) SELECT ... FROM <source>`: a new row of `model` written only when the CTE
    `source` has a row, its parameters in `insert_values()` order and its `link` field (when given) taken
    from `<source>.<link_column>`. Parameters in a SELECT list have no target column to take a type from
    (a NULL would be text, which jsonb and bigint columns refuse), hence the casts."""
    fields = _insert_fields(model)
    expressions = [f"{source}.{link_column}" if f.name == link else f"CAST(%s AS {_cast_type(f)})" for f in fields]
    return (
        f"INSERT INTO {table(model)} ({', '.join(qn(f.column) for f in fields)})"
        f" SELECT {', '.join(expressions)} FROM {source}"
    )


def insert(obj: Model, *, skip_conflicts: bool = False) -> bool:
    """`obj.save()` for a new row with an automatic primary key, as one prepared statement (no signals:
    the host registers none). With `skip_conflicts`, a row that would break a unique constraint is not
    written and False is returned (`INSERT ... ON CONFLICT DO NOTHING`), without aborting the transaction."""
    row = sql_fetchone(_insert_sql(type(obj), connection.vendor, skip_conflicts), insert_values(obj))
    if row is None:
        return False
    _saved(obj, row[0])
    return True


def _saved(obj: Model, pk: Any) -> None:
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = connection.alias


def insert_with_children(parent: Model, children: Sequence[Model], *, link: str, skip_conflicts: bool = False) -> bool:
    """Insert `parent` and then `children`, whose foreign key `link` is pointed at it: `insert()` for a
    small tree of new rows. With `skip_conflicts`, a parent that would break a unique constraint is not
    written, nor are its children, and False is returned.

    On PostgreSQL it is one statement (data-modifying CTEs), so it needs no transaction of its own and
    costs one round trip instead of one per row plus BEGIN and COMMIT; elsewhere it is one `insert()`
    per row in a transaction.
    """
    if connection.vendor != "postgresql":
        with transaction.atomic():
            if not insert(parent, skip_conflicts=skip_conflicts):
                return False
            for child in children:
                setattr(child, link, parent)
                insert(child)
        return True
    values = insert_values(parent)
    for child in children:
        values += insert_values(child, link=link)
    sql = _insert_with_children_sql(type(parent), tuple(type(child) for child in children), link, skip_conflicts)
    ids = dict(sql_fetchall(sql, values))
    if 0 not in ids:
        return False
    _saved(parent, ids[0])
    for index, child in enumerate(children, start=1):
        setattr(child, link, parent)
        _saved(child, ids[index])
    return True


@functools.cache
def _insert_with_children_sql(
    parent: type[Model], children: tuple[type[Model], ...], link: str, skip_conflicts: bool
) -> str:
    pk = qn(cast(Any, parent._meta.pk).column)
    parts = [f"p AS ({_insert_sql(parent, 'postgresql', skip_conflicts)})"]
    results = [f"SELECT 0, {pk} FROM p"]
    for index, model in enumerate(children, start=1):
        child_pk = qn(cast(Any, model._meta.pk).column)
        parts.append(f"c{index} AS ({insert_select_sql(model, 'p', link=link, link_column=pk)} RETURNING {child_pk})")
        results.append(f"SELECT {index}, {child_pk} FROM c{index}")
    return f"WITH {', '.join(parts)} {' UNION ALL '.join(results)}"
