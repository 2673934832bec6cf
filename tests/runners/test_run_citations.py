"""Citations a run's reply drew on (`run.completed.metadata.citations`) are part of `GET /api/v1/runs/{id}`."""

from __future__ import annotations

import pytest
from django.utils import timezone

from runners.models import Run, RunEvent
from tests.gateway.support import binding_for, message, post_event

pytestmark = pytest.mark.django_db

CITATION = {
    "kb_id": "manual",
    "document_name": "manual.txt",
    "position": 3,
    "score": 0.82,
    "excerpt": "Reset the router by holding the button for ten seconds.",
}


@pytest.fixture
def run(api_client, workspace) -> Run:
    binding_for(workspace, binding_id="support", concurrency_policy="parallel")
    response = post_event(api_client, message("how do I reset it?", conversation_id="c-cite"))
    run = Run.objects.get(run_id=response.json()["runs"][0]["run_id"])
    Run.objects.filter(pk=run.pk).update(status="completed", started_at=timezone.now(), finished_at=timezone.now())
    return run


def test_a_run_reads_back_with_the_citations_of_its_reply(api_client, run):
    RunEvent.objects.create(run=run, seq=1, type="message.completed", data={"message": {"content": "Hold it."}})
    RunEvent.objects.create(run=run, seq=2, type="run.completed", data={"metadata": {"citations": [CITATION]}})

    body = api_client.get(f"/api/v1/runs/{run.run_id}").json()

    assert body["citations"] == [CITATION]


@pytest.mark.parametrize("data", [{}, {"metadata": {}}, {"metadata": {"citations": "not a list"}}])
def test_a_run_without_citations_reads_back_with_none(api_client, run, data):
    RunEvent.objects.create(run=run, seq=1, type="run.completed", data=data)

    assert api_client.get(f"/api/v1/runs/{run.run_id}").json()["citations"] == []


def test_a_run_still_going_has_no_citations_yet(api_client, run):
    Run.objects.filter(pk=run.pk).update(status="running", finished_at=None)

    assert api_client.get(f"/api/v1/runs/{run.run_id}").json()["citations"] == []
