"""The runs REST API: list with filters and a cursor, detail, persisted result events, cancel — always
inside the caller's workspace."""

from __future__ import annotations

import pytest
from django.utils import timezone

from runners.models import Run, RunEvent
from tests.factories import WorkspaceFactory
from tests.gateway.support import binding_for, field_errors_of, message, post_event

pytestmark = pytest.mark.django_db




@pytest.fixture
def binding(workspace):
    return binding_for(workspace, binding_id="support", concurrency_policy="parallel")


def start_run(client, conversation_id: str = "c-1", text: str = "hi", **fields) -> Run:
    response = post_event(client, message(text, conversation_id=conversation_id, **fields))
    assert response.status_code == 202, response.content
    [run] = response.json()["runs"]
    return Run.objects.get(run_id=run["run_id"])


def finish(run: Run, status: str = "completed", **fields) -> Run:
    Run.objects.filter(pk=run.pk).update(status=status, finished_at=timezone.now(), **fields)
    run.refresh_from_db()
    return run


def test_a_run_reads_back_with_its_facts(api_client, binding):
    run = start_run(api_client, conversation_id="c-9", event_id="evt-9", thread_id="t-1")
    finish(run, output="Done.", usage={"total_tokens": 12}, started_at=timezone.now())

    body = api_client.get(f"/api/v1/runs/{run.run_id}").json()

    assert body["run_id"] == str(run.run_id)
    assert (body["status"], body["output"], body["usage"]) == ("completed", "Done.", {"total_tokens": 12})
    assert (body["binding_id"], body["runner_id"]) == ("support", binding.runner_id)
    assert (body["conversation_id"], body["thread_id"], body["event_id"]) == ("c-9", "t-1", "evt-9")
    assert body["is_observer"] is False
    assert body["error"] is None
    for stamp in ("created_at", "started_at", "finished_at"):
        assert body[stamp]


def test_another_workspaces_run_is_not_found(api_client, api_client_for, binding):
    run = start_run(api_client)
    stranger = api_client_for(WorkspaceFactory.create())

    for response in (
        stranger.get(f"/api/v1/runs/{run.run_id}"),
        stranger.get(f"/api/v1/runs/{run.run_id}/events"),
        stranger.post(f"/api/v1/runs/{run.run_id}/cancel"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert Run.objects.get(pk=run.pk).status == "queued"


@pytest.mark.parametrize("run_id", ["not-a-uuid", "123", "4a059981-78fc-41a7-8825-cd2351b4845b"])
def test_an_unknown_or_malformed_run_id_is_not_found(api_client, run_id):
    response = api_client.get(f"/api/v1/runs/{run_id}")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_runs_list_newest_first_and_filter(api_client, api_client_for, workspace, binding):
    binding_for(workspace, binding_id="audit", delivery_policy={"enable_reply": False}, concurrency_policy="parallel")
    first = post_event(api_client, message(conversation_id="c-1")).json()["runs"]
    second = post_event(api_client, message(conversation_id="c-2")).json()["runs"]
    finish(Run.objects.get(run_id=second[0]["run_id"]), status="failed")
    post_event(api_client_for(WorkspaceFactory.create()), message(conversation_id="c-1"))

    every = api_client.get("/api/v1/runs").json()
    in_c1 = api_client.get("/api/v1/runs", {"conversation_id": "c-1"}).json()
    failed = api_client.get("/api/v1/runs", {"status": "failed"}).json()
    audit = api_client.get("/api/v1/runs", {"binding_id": "audit"}).json()

    ids = [r["run_id"] for r in every["items"]]
    assert ids == [r["run_id"] for r in reversed(first + second)]
    assert [r["run_id"] for r in in_c1["items"]] == [r["run_id"] for r in reversed(first)]
    assert [r["run_id"] for r in failed["items"]] == [second[0]["run_id"]]
    assert {r["binding_id"] for r in audit["items"]} == {"audit"}
    assert len(audit["items"]) == 2


def test_the_runs_list_pages_by_cursor(api_client, binding):
    created = [str(start_run(api_client, text=f"m{n}").run_id) for n in range(5)]

    seen: list[str] = []
    query: dict[str, object] = {"limit": 2}
    while True:
        page = api_client.get("/api/v1/runs", query).json()
        seen.extend(r["run_id"] for r in page["items"])
        if page["next_before"] is None:
            break
        query = {"limit": 2, "before": page["next_before"]}

    assert seen == list(reversed(created))


@pytest.mark.parametrize(
    ("query", "field"),
    [({"status": "done"}, "status"), ({"limit": 101}, "limit"), ({"limit": "x"}, "limit"), ({"before": -3}, "before")],
)
def test_invalid_run_list_parameters_are_refused(api_client, query, field):
    assert field in field_errors_of(api_client.get("/api/v1/runs", query))


def test_run_events_page_after_a_seq(api_client, binding):
    run = start_run(api_client)
    for seq in range(1, 6):
        RunEvent.objects.create(run=run, seq=seq, type="message.delta", data={"chunk": f"c{seq}"})

    first = api_client.get(f"/api/v1/runs/{run.run_id}/events", {"limit": 3}).json()
    rest = api_client.get(f"/api/v1/runs/{run.run_id}/events", {"after_seq": 3, "limit": 3}).json()

    assert [e["seq"] for e in first["items"]] == [1, 2, 3]
    assert first["has_more"] is True
    assert first["items"][0]["type"] == "message.delta"
    assert first["items"][0]["data"] == {"chunk": "c1"}
    assert first["items"][0]["created_at"]
    assert [e["seq"] for e in rest["items"]] == [4, 5]
    assert rest["has_more"] is False


def test_run_events_limit_is_capped(api_client, binding):
    run = start_run(api_client)

    response = api_client.get(f"/api/v1/runs/{run.run_id}/events", {"limit": 1000})

    assert "limit" in field_errors_of(response)


def test_cancelling_a_queued_run_ends_it_at_once(api_client, binding):
    run = start_run(api_client)

    response = api_client.post(f"/api/v1/runs/{run.run_id}/cancel", {"reason": "changed my mind"}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    assert response.json()["status_reason"] == "changed my mind"
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def test_cancelling_a_running_run_asks_it_to_stop(api_client, binding):
    run = start_run(api_client)
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now())

    response = api_client.post(f"/api/v1/runs/{run.run_id}/cancel")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "running"
    assert body["cancel_requested_at"]


def test_cancelling_a_finished_run_answers_409(api_client, binding):
    run = finish(start_run(api_client))

    response = api_client.post(f"/api/v1/runs/{run.run_id}/cancel")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run.finished"
    assert Run.objects.get(pk=run.pk).status == "completed"


def test_a_cancel_body_with_unknown_fields_is_refused(api_client, binding):
    run = start_run(api_client)

    response = api_client.post(f"/api/v1/runs/{run.run_id}/cancel", {"why": "x"}, format="json")

    assert "why" in field_errors_of(response)
    assert Run.objects.get(pk=run.pk).status == "queued"
