"""The run page of the admin reads as a timeline: each result with its label, the time since the run started
and a one-line summary (streamed pieces as one row), its payload folded away; usage as tables, not JSON."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from runners.models import Run, RunEvent
from tests.factories import UserFactory
from tests.gateway.support import binding_for, message, post_event

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def run(api_client, workspace) -> Run:
    binding_for(workspace, binding_id="support", concurrency_policy="parallel")
    response = post_event(api_client, message("what is the weather", conversation_id="c-timeline"))
    run = Run.objects.get(run_id=response.json()["runs"][0]["run_id"])
    started = timezone.now() - timedelta(seconds=10)
    Run.objects.filter(pk=run.pk).update(status="completed", started_at=started, finished_at=timezone.now())
    run.refresh_from_db()
    return run


def result(run: Run, seq: int, type_: str, data: dict, after: float) -> None:
    event = RunEvent.objects.create(run=run, seq=seq, type=type_, data=data)
    assert run.started_at is not None
    RunEvent.objects.filter(pk=event.pk).update(created_at=run.started_at + timedelta(seconds=after))


def page(admin_client: Client, run: Run) -> str:
    response = admin_client.get(reverse("admin:runners_run_change", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_results_read_as_a_timeline_with_labels_times_and_summaries(admin_client, run):
    result(
        run, 1, "tool.call.started", {"tool_call_id": "t1", "tool_name": "weather", "parameters": {"city": "Oslo"}}, 0.5
    )
    result(run, 2, "tool.call.completed", {"tool_call_id": "t1", "tool_name": "weather", "result": {"c": 3}}, 1.25)
    result(run, 3, "message.delta", {"chunk": {"content": "It is "}}, 2)
    result(run, 4, "message.delta", {"chunk": {"content": "3 degrees."}}, 2.1)
    result(run, 5, "message.completed", {"message": {"role": "assistant", "content": "It is 3 degrees."}}, 2.2)
    result(run, 6, "run.completed", {"metadata": {"citations": [{"document_name": "a.txt"}]}}, 2.3)

    html = page(admin_client, run)

    assert 'class="run-timeline"' in html
    assert "Tool called" in html
    assert "Tool answered" in html
    assert "Run completed" in html
    assert "+0.50 s" in html
    assert "+1.25 s" in html
    assert "It is 3 degrees." in html  # the streamed pieces joined into one row
    assert "in 2 pieces" in html
    assert html.count('data-type="message.delta"') == 1
    assert "1 citation(s)" in html
    assert "<details><summary>payload</summary>" in html  # folded, not dumped
    assert "#1 tool.call.started" not in html


def test_a_failed_tool_and_run_are_marked_failed(admin_client, run):
    result(run, 1, "tool.call.completed", {"tool_call_id": "t", "tool_name": "db", "error": {"message": "timeout"}}, 1)
    result(run, 2, "run.failed", {"code": "runner.error", "message": "it broke"}, 2)

    html = page(admin_client, run)

    assert html.count('class="event failed"') == 2
    assert "db: timeout" in html
    assert "runner.error: it broke" in html


def test_the_runners_usage_is_a_table(admin_client, run):
    Run.objects.filter(pk=run.pk).update(usage={"prompt_tokens": 7, "models": {"gpt-x": {"total_tokens": 9}}})

    html = page(admin_client, run)

    assert 'class="runner-usage"' in html
    assert "<td><code>prompt_tokens</code></td><td>7</td>" in html
    assert "<td><code>models.gpt-x.total_tokens</code></td><td>9</td>" in html
