"""The hand-written statements of the run hot path (`runners/orchestrator/db.py`): prepared on PostgreSQL,
and rows turned back into model instances with deferred columns loaded on demand."""

from __future__ import annotations

import pytest
from django.db import connection

from runners.models import RunnerDescriptor
from runners.orchestrator.db import ModelColumns, sql_fetchone, table
from tests.factories import RunnerDescriptorFactory

pytestmark = pytest.mark.django_db


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are a PostgreSQL feature")
def test_hot_path_statements_are_prepared_on_the_server():
    # Django turns psycopg's prepared statements off unless the settings set a threshold; without it
    # every claim re-planned its seven-table join.
    sql = "SELECT %s::int + 41"
    assert sql_fetchone(sql, [1]) == (42,)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%+ 41%"])
        prepared = [row[0] for row in cursor.fetchall()]
    assert prepared == ["SELECT $1::int + 41"]


def test_deferred_columns_are_left_out_and_loaded_when_read():
    descriptor = RunnerDescriptorFactory.create(manifest={"apiVersion": "v1", "marker": "kept"})
    columns = ModelColumns(RunnerDescriptor, "d", defer=("manifest", "config_schema"))
    row = sql_fetchone(f"SELECT {columns.select} FROM {table(RunnerDescriptor)} d WHERE d.id = %s", [descriptor.pk])
    assert row is not None
    assert len(row) == len(columns)

    loaded = columns.load(row)

    assert loaded is not None
    assert loaded.get_deferred_fields() == {"manifest", "config_schema"}
    assert loaded.runner_id == descriptor.runner_id
    assert loaded.manifest == {"apiVersion": "v1", "marker": "kept"}
