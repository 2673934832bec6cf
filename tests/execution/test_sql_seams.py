"""Every hand-written statement of the apps' SQL seams (`bindings/sql.py`, `transcripts/sql.py`,
`runners/sql.py`), rendered as the database receives it into `sql_seams.txt` beside this file, so a reviewer
reads the real text of a change and the diff shows what a model change did to the statements. Each one is
also run once here, so the rendered text is valid SQL on this database.

A change to a statement fails this test until the file is rendered anew:
`LANGBOT_RENDER_SQL=1 .venv/bin/pytest tests/execution/test_sql_seams.py`, then review and commit the file.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from bindings import sql as bindings_sql
from foundation.sql import Statement
from runners import sql as runners_sql
from runners.models import Run
from tests.factories import AgentBindingFactory, RunnerDescriptorFactory, WorkspaceFactory
from transcripts import sql as transcripts_sql
from transcripts.models import EventLog, TranscriptItem

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]  # the seams' fast paths are PostgreSQL's

RENDERED = Path(__file__).with_name("sql_seams.txt")


def _statements(run: Run) -> dict[str, Callable[[], Statement]]:
    now = timezone.now()
    claim = runners_sql.Claim(
        run=run, owner="host:1", lease_token=uuid.UUID(int=1), lease_expires_at=now, started_at=now,
        deadline_at=now, authorization={}, queue_policy=True,
    )  # fmt: skip
    state = transcripts_sql.state_snapshot(workspace_id=run.workspace_id, scope_keys={"conversation": "c"}, alias="se")
    reply = TranscriptItem(workspace_id=run.workspace_id, conversation_id="c", role="assistant", content="hi")
    end = runners_sql.RunEnd(status="completed", status_reason="", error=None, usage=None, output="hi")
    events = [("message.completed", {"message": {"role": "assistant", "content": "hi"}})]
    return {
        "bindings.binding_versions": lambda: bindings_sql.binding_versions(workspace_id=run.workspace_id),
        "transcripts.history_rows (backward, in a thread, before a cursor)": lambda: transcripts_sql.history_rows(
            workspace_id=run.workspace_id, conversation_id="c", thread_id="t", before=10, after=None, forward=False,
            limit=51,
        ),
        "transcripts.history_rows (forward, after a cursor)": lambda: transcripts_sql.history_rows(
            workspace_id=run.workspace_id, conversation_id="c", thread_id=None, before=None, after=10, forward=True,
            limit=51,
        ),
        "transcripts.state_snapshot": lambda: state,
        "runners.conversation_now": lambda: runners_sql.conversation_now(
            workspace_id=run.workspace_id, conversation_id="c"
        ),
        "runners.run_load": lambda: runners_sql.run_load(run_id=run.run_id),
        "runners.run_claim (queue policy)": lambda: runners_sql.run_claim(claim),
        "runners.run_claim_with_state (queue policy)": lambda: runners_sql.run_claim_with_state(claim, state),
        "runners.ledger_write (while running)": lambda: runners_sql.ledger_write(
            run=run, lease_token=str(uuid.UUID(int=1)), first_seq=1, events=events, now=now,
            lease_expires_at=now,
        ),
        "runners.ledger_write (the end, with the reply)": lambda: runners_sql.ledger_write(
            run=run, lease_token=str(uuid.UUID(int=1)), first_seq=2, events=events, now=now, end=end, reply=reply,
        ),
        "runners.ledger_append_many": lambda: runners_sql.ledger_append_many(
            appends=[runners_sql.Append(run=run, lease_token=str(uuid.UUID(int=1)), first_seq=1, events=events)],
            now=now, lease_expires_at=now,
        ),
        "runners.conversation_lock": lambda: runners_sql.conversation_lock(binding_pk=1, conversation_id="c"),
        "runners.conversation_positions_take": lambda: runners_sql.conversation_positions_take(
            workspace_id=run.workspace_id, conversation_id="c", count=2
        ),
    }


def _render(name: str, statement: Statement) -> str:
    # One clause a line: readable, and a change shows as a change of the clause it touched.
    text = re.sub(
        r"(?<!LEFT) (?=(SELECT|FROM|WHERE|AND|OR|JOIN|LEFT JOIN|ORDER BY|LIMIT|UNION ALL|SET|RETURNING|ON CONFLICT|"
        r"INSERT INTO|WITH|, \w+ AS \()\b)",
        "\n  ",
        statement.sql,
    )
    flags = [flag for flag, on in (("prepared", statement.prepare), ("binary", statement.binary)) if on]
    return f"-- {name} ({', '.join(flags) or 'planned per execution'}; {len(statement.params)} parameters)\n{text};\n"


def _a_run() -> Run:
    workspace = WorkspaceFactory.create()
    descriptor = RunnerDescriptorFactory.create()
    binding = AgentBindingFactory.create(workspace=workspace, runner_id=descriptor.runner_id)
    event = EventLog.objects.create(workspace=workspace, event_id="e1", event_type="message.received", source="api")
    return Run.objects.create(
        workspace=workspace, event=event, binding=binding, binding_key=binding.binding_id,
        runner_id=descriptor.runner_id, conversation_id="c",
    )  # fmt: skip


def test_every_statement_renders_as_committed_and_runs():
    run = _a_run()
    statements = {name: build() for name, build in _statements(run).items()}

    for name, statement in statements.items():
        # Valid on this database with its own parameters (rolled back: some of them write).
        with transaction.atomic():
            sid = transaction.savepoint()
            if statement.sql.lstrip().upper().startswith(("SELECT", "WITH")):
                statement.fetchall()
            else:
                statement.execute()
            transaction.savepoint_rollback(sid)
        assert statement.sql.count("%s") == len(statement.params), name

    rendered = "".join(_render(name, statement) + "\n" for name, statement in statements.items())
    if os.environ.get("LANGBOT_RENDER_SQL"):
        RENDERED.write_text(rendered)
    assert RENDERED.read_text() == rendered, (
        f"the statements changed; render {RENDERED.name} anew (see this module's docstring) and review the diff"
    )
