"""Twenty clients posting one event_id at the same moment get one event and one set of runs.

Runs against a real database server with real transactions; SQLite serializes every write, so the race
this guards against cannot happen there.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from rest_framework.test import APIClient

from bindings.services import api_key_create
from runners.models import Run
from tests.factories import WorkspaceFactory
from tests.gateway.support import binding_for, message, post_event
from transcripts.models import EventLog, TranscriptItem

CONCURRENCY = 20


@pytest.mark.postgres  # SQLite serializes writers, so concurrent inserts never race
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_posts_of_one_event_id_make_one_event_and_one_run(monkeypatch):
    workspace = WorkspaceFactory.create()
    binding_for(workspace, binding_id="support")
    binding_for(workspace, binding_id="audit", delivery_policy={"enable_reply": False})
    _, key = api_key_create(workspace=workspace)
    dispatched: list[str] = []
    # Count wake-ups instead of talking to a broker: every run must be sent exactly once.
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: dispatched.append(run_id))
    start = threading.Barrier(CONCURRENCY)

    def post(_: int):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        try:
            start.wait()
            response = post_event(client, message("once", event_id="evt-race", conversation_id="c-race"))
            return response.status_code, response.json()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        answers = list(pool.map(post, range(CONCURRENCY)))

    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] * (CONCURRENCY - 1) + [202], answers
    run_sets = {tuple(r["run_id"] for r in body["runs"]) for _, body in answers}
    assert len(run_sets) == 1
    assert [body["duplicate"] for status, body in answers if status == 202] == [False]
    assert EventLog.objects.filter(event_id="evt-race").count() == 1
    assert Run.objects.count() == 2
    assert {str(r) for r in Run.objects.values_list("run_id", flat=True)} == set(next(iter(run_sets)))
    assert TranscriptItem.objects.count() == 1
    assert sorted(dispatched) == sorted(next(iter(run_sets)))
