"""The hand-written statements of the run hot path (`foundation/sql.py`): prepared on PostgreSQL,
rows turned back into model instances with deferred columns loaded on demand, and a parent row written
with its children in one statement."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DataError, connection, transaction

from bindings.models import RunnerDescriptor
from foundation.sql import ModelColumns, _numbered, insert_with_children, sql_fetchone, table
from runners.models import Run
from runners.sql import _ledger_sql, _run_claim_sql
from tests.factories import AgentBindingFactory, RunnerDescriptorFactory, WorkspaceFactory
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db


@pytest.mark.postgres  # prepared statements are a PostgreSQL feature
def test_hot_path_statements_are_prepared_on_the_server():
    # Django turns psycopg's prepared statements off unless the settings set a threshold; without it
    # every claim re-planned its seven-table join.
    sql = "SELECT %s::int + 41"
    assert sql_fetchone(sql, [1]) == (42,)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%+ 41%"])
        prepared = [row[0] for row in cursor.fetchall()]
    assert prepared == ["SELECT $1::int + 41"]


@pytest.mark.postgres  # prepared statements are a PostgreSQL feature
def test_long_statements_with_many_parameters_run_and_a_stray_percent_sign_is_refused():
    # Statements go to PostgreSQL in their `$n` form, numbered here once per statement.
    values = list(range(60))
    sql = "SELECT " + ", ".join(["%s::int"] * len(values)) + " -- " + "x" * 5000
    assert sql_fetchone(sql, values) == tuple(values)

    with pytest.raises(ValueError, match="placeholders"):
        sql_fetchone("SELECT %s::text || '%%'", ["a"])


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


def _event(workspace, event_id: str) -> EventLog:
    return EventLog(
        workspace=workspace, event_id=event_id, event_type="message.received", conversation_id="c1", input={}
    )


def _item(workspace, content: str, *, role: str = "user", conversation_id: str = "c1") -> TranscriptItem:
    return TranscriptItem(workspace=workspace, conversation_id=conversation_id, role=role, content=content)


def test_insert_with_children_writes_the_rows_linked_to_the_parent():
    workspace = WorkspaceFactory.create()
    event, first, second = _event(workspace, "e1"), _item(workspace, "one"), _item(workspace, "two", role="assistant")

    assert insert_with_children(event, [first, second], link="event", skip_conflicts=True)

    stored = EventLog.objects.get(pk=event.pk)
    items = list(TranscriptItem.objects.filter(event=stored).order_by("id"))
    assert [(i.pk, i.content) for i in items] == [(first.pk, "one"), (second.pk, "two")]
    assert first.event_id == second.event_id == stored.pk


def test_insert_with_children_writes_nothing_when_the_parent_conflicts():
    workspace = WorkspaceFactory.create()
    assert insert_with_children(
        _event(workspace, "dup"), [_item(workspace, "first")], link="event", skip_conflicts=True
    )

    again = _event(workspace, "dup")
    assert not insert_with_children(again, [_item(workspace, "second")], link="event", skip_conflicts=True)

    assert again.pk is None
    assert EventLog.objects.filter(workspace=workspace, event_id="dup").count() == 1
    assert list(TranscriptItem.objects.values_list("content", flat=True)) == ["first"]


@pytest.mark.postgres  # SQLite does not enforce varchar lengths
def test_insert_with_children_refuses_an_over_long_child_value_and_writes_nothing():
    # The children's values are cast without the length modifier: a cast to varchar(255) would have
    # truncated the value silently instead of refusing it as a plain INSERT does.
    workspace = WorkspaceFactory.create()
    too_long = _item(workspace, "x", conversation_id="c" * 300)

    with pytest.raises(DataError), transaction.atomic():
        insert_with_children(_event(workspace, "long"), [too_long], link="event")

    assert not EventLog.objects.filter(event_id="long").exists()
    assert not TranscriptItem.objects.exists()


def _generic_plan_indexes(sql: str, relation: str) -> set[str]:
    """The indexes on `relation` that the generic plan of `sql` (the plan a prepared statement keeps)
    scans, planned now."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE probe AS {_numbered(sql)}")
        cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE probe({', '.join(['NULL'] * sql.count('%s'))})")
        plan = cursor.fetchone()[0]
        cursor.execute("DEALLOCATE probe")
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("Relation Name") == relation and "Index Name" in node:
                found.add(node["Index Name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan)
    return found


@pytest.mark.postgres  # prepared generic plans are a PostgreSQL feature
@pytest.mark.parametrize("statement", ["claim under queue", "run end"])
def test_conversation_checks_read_only_active_runs_on_a_table_without_statistics(statement):
    # The claim and the run's end look for the conversation's other active runs in statements prepared on
    # pooled connections, which keep the plan made while the table was young. With full-table indexes
    # only, that plan read every run of the workspace (or every run of a status) at each claim and each
    # run's end, until autovacuum analyzed the table. The partial indexes hold active runs only.
    workspace = WorkspaceFactory.create()
    binding = AgentBindingFactory.create(workspace=workspace)
    events = EventLog.objects.bulk_create([_event(workspace, f"e{i}") for i in range(200)])
    Run.objects.bulk_create(
        Run(
            workspace=workspace,
            event=event,
            binding=binding,
            binding_key=binding.binding_id,
            runner_id=binding.runner_id,
            conversation_id=f"c{i}",
            status=Run.Status.COMPLETED,
        )
        for i, event in enumerate(events)
    )
    if statement == "claim under queue":
        sql = _run_claim_sql(queue_policy=True)
    else:
        sql = _ledger_sql(final=True, reply=False)

    indexes = _generic_plan_indexes(sql, table(Run).strip('"'))

    # The claim names both active statuses, which only `run_active_idx` covers; the run's end looks for
    # a queued run, which `run_queue_idx` (every queued run, few) may answer too.
    active = {"run_active_idx"} if statement == "claim under queue" else {"run_active_idx", "run_queue_idx"}
    assert indexes & active
    assert indexes <= {"run_active_idx", "run_queue_idx", "run_lease_idx", "runners_run_pkey"}
