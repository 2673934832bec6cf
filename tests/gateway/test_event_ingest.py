"""POST /api/v1/events: an accepted event is logged, enters the transcript and starts one run per binding;
routing problems are recorded visibly; the same event_id never runs twice."""

from __future__ import annotations

import uuid

import pytest

from runners.models import Run
from tests.factories import BotFactory, WorkspaceFactory
from tests.gateway.support import binding_for, message, post_event
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db


def test_an_accepted_message_is_logged_and_starts_a_queued_run(api_client, workspace):
    binding = binding_for(workspace, binding_id="support")

    response = post_event(api_client, message("Where is my order?", event_id="evt-1", conversation_id="c-1"))

    assert response.status_code == 202, response.content
    body = response.json()
    assert body["event_id"] == "evt-1"
    assert body["duplicate"] is False
    assert body["status"] == "accepted"
    assert "error" not in body
    [run] = Run.objects.all()
    assert body["runs"] == [
        {
            "run_id": str(run.run_id),
            "binding_id": "support",
            "runner_id": binding.runner_id,
            "status": "queued",
            "status_reason": "",
            "is_observer": False,
            "error": None,
            "output": "",
        }
    ]
    event = EventLog.objects.get()
    assert (event.event_type, event.source, event.conversation_id) == ("message.received", "api", "c-1")
    assert event.input["text"] == "Where is my order?"
    assert event.input_summary == "Where is my order?"
    assert run.event == event
    assert run.conversation_id == "c-1"


def test_a_message_enters_the_transcript_as_the_user_item(api_client, workspace):
    post_event(
        api_client,
        {
            "conversation_id": "c-1",
            "thread_id": "t-9",
            "actor": {"actor_type": "user", "actor_id": "u-1", "actor_name": "Ann"},
            "input": {"text": "hi", "contents": [{"type": "image_url", "image_url": "https://x/y.png"}]},
        },
    )

    item = TranscriptItem.objects.get()
    assert item.role == "user"
    assert (item.conversation_id, item.thread_id, item.content) == ("c-1", "t-9", "hi")
    assert item.contents == [{"type": "image_url", "image_url": "https://x/y.png"}]
    assert item.actor == {"actor_type": "user", "actor_id": "u-1", "actor_name": "Ann", "metadata": {}}
    assert item.event == EventLog.objects.get()


def test_a_non_message_event_needs_no_input_and_adds_no_transcript_item(api_client, workspace):
    response = post_event(api_client, {"event_type": "member.joined", "subject": {"subject_type": "group"}})

    assert response.status_code == 202, response.content
    assert EventLog.objects.get().event_type == "member.joined"
    assert not TranscriptItem.objects.exists()


def test_an_event_without_id_gets_a_generated_one(api_client, workspace):
    first = post_event(api_client, message()).json()
    second = post_event(api_client, message()).json()

    assert uuid.UUID(first["event_id"])
    assert first["event_id"] != second["event_id"]
    assert EventLog.objects.count() == 2


def test_the_same_event_id_again_answers_200_with_the_same_runs(api_client, workspace):
    binding_for(workspace)
    first = post_event(api_client, message(event_id="evt-dup"))

    again = post_event(api_client, message("a retry with other text", event_id="evt-dup"))

    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["runs"] == first.json()["runs"]
    assert EventLog.objects.count() == 1
    assert Run.objects.count() == 1
    assert TranscriptItem.objects.count() == 1


def test_the_same_event_id_in_another_workspace_is_another_event(api_client, api_client_for, workspace):
    other = WorkspaceFactory.create()
    binding_for(workspace)
    binding_for(other)

    post_event(api_client, message(event_id="evt-shared"))
    response = post_event(api_client_for(other), message(event_id="evt-shared"))

    assert response.status_code == 202
    assert response.json()["duplicate"] is False
    assert EventLog.objects.filter(event_id="evt-shared").count() == 2
    assert Run.objects.count() == 2


def test_observers_run_beside_the_replying_binding(api_client, workspace):
    binding_for(workspace, binding_id="replier")
    binding_for(workspace, binding_id="audit", delivery_policy={"enable_reply": False})

    runs = post_event(api_client, message()).json()["runs"]

    assert [(r["binding_id"], r["is_observer"]) for r in runs] == [("replier", False), ("audit", True)]


def test_a_binding_conflict_is_recorded_and_nothing_runs(api_client, workspace):
    binding_for(workspace, binding_id="alpha")
    binding_for(workspace, binding_id="beta")

    response = post_event(api_client, message(event_id="evt-conflict"))

    assert response.status_code == 202
    body = response.json()
    assert body["runs"] == []
    assert body["status"] == "conflict"
    assert body["error"]["code"] == "binding.conflict"
    assert body["error"]["details"] == {"binding_ids": ["alpha", "beta"]}
    event = EventLog.objects.get()
    assert event.status == EventLog.Status.CONFLICT
    assert event.error == body["error"]
    assert not Run.objects.exists()


def test_an_event_no_binding_handles_is_recorded_as_such(api_client, workspace):
    binding_for(workspace, event_types=["member.joined"])

    response = post_event(api_client, message())

    assert response.status_code == 202
    assert response.json()["runs"] == []
    assert response.json()["status"] == "no_binding"
    assert EventLog.objects.get().status == EventLog.Status.NO_BINDING


def test_a_bot_scoped_binding_handles_its_bots_events(api_client, workspace):
    bot = BotFactory.create(workspace=workspace, bot_id="tg-bot")
    binding_for(workspace, binding_id="general")
    binding_for(workspace, binding_id="for-tg", scope_type="bot", scope_id="tg-bot")

    with_bot = post_event(api_client, message(bot_id=bot.bot_id)).json()
    without_bot = post_event(api_client, message()).json()

    assert [r["binding_id"] for r in with_bot["runs"]] == ["for-tg"]
    assert [r["binding_id"] for r in without_bot["runs"]] == ["general"]
    assert EventLog.objects.get(event_id=with_bot["event_id"]).bot == bot


def test_the_input_summary_is_the_start_of_the_text(api_client, workspace):
    post_event(api_client, message("word " * 100))

    summary = EventLog.objects.get().input_summary
    assert len(summary) == 200
    assert summary.startswith("word word")


def test_wait_answers_with_the_final_status_and_output(api_client, workspace, monkeypatch):
    binding_for(workspace)
    waited: dict[str, object] = {}

    def finish_runs(*, run_ids, timeout):
        # Stands in for a worker finishing the run while the request waits.
        waited.update(run_ids=run_ids, timeout=timeout)
        Run.objects.filter(run_id__in=run_ids).update(status="completed", status_reason="", output="Shipped.")

    monkeypatch.setattr("runners.lifecycle.services.runs_wait", finish_runs)

    response = post_event(api_client, message(), wait="2.5")

    assert response.status_code == 200  # every run ended within the wait
    [run] = response.json()["runs"]
    assert waited == {"run_ids": [run["run_id"]], "timeout": 2.5}
    assert (run["status"], run["output"]) == ("completed", "Shipped.")


def test_wait_answers_202_while_a_run_is_still_running(api_client, workspace, monkeypatch):
    binding_for(workspace)

    def still_running(*, run_ids, timeout):
        Run.objects.filter(run_id__in=run_ids).update(status="running")

    monkeypatch.setattr("runners.lifecycle.services.runs_wait", still_running)

    response = post_event(api_client, message(), wait="1")

    assert response.status_code == 202
    [run] = response.json()["runs"]
    assert run["status"] == "running"


def test_the_schema_tells_200_from_202_for_a_wait(api_client):
    operation = api_client.get("/api/schema/", {"format": "json"}).json()["paths"]["/api/v1/events"]["post"]

    assert "every run of the event ended within the wait" in operation["responses"]["200"]["description"]
    assert "still queued or running" in operation["responses"]["202"]["description"]


def test_wait_zero_does_not_wait(api_client, workspace, monkeypatch):
    binding_for(workspace)
    calls = []
    monkeypatch.setattr("runners.lifecycle.services.runs_wait", lambda **kw: calls.append(kw))

    response = post_event(api_client, message(), wait="0")

    assert response.status_code == 202
    assert calls == []


def test_an_event_reads_back_with_its_runs(api_client, workspace):
    binding_for(workspace, binding_id="support")
    accepted = post_event(
        api_client,
        message(
            "hello",
            event_id="evt-read",
            source="webui",
            source_event_type="chat.send",
            event_time="2026-01-02T03:04:05+00:00",
            data={"chat_id": 7},
        ),
    ).json()

    event = api_client.get("/api/v1/events/evt-read").json()

    assert event["event_id"] == "evt-read"
    assert (event["source"], event["source_event_type"]) == ("webui", "chat.send")
    assert event["event_time"].startswith("2026-01-02T03:04:05")
    assert event["input"]["text"] == "hello"
    assert event["data"] == {"chat_id": 7}
    assert event["status"] == "accepted"
    assert event["runs"] == accepted["runs"]


def test_another_workspaces_event_is_not_found(api_client, api_client_for, workspace):
    post_event(api_client, message(event_id="evt-mine"))

    response = api_client_for(WorkspaceFactory.create()).get("/api/v1/events/evt-mine")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
