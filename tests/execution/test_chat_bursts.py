"""Chat bursts: the `merge` and `steer` concurrency policies and a runner that declares no `interrupt` —
run_create and the claim, without a worker (the broker sends are recorded). Through the real worker:
tests/integration/test_chat_bursts.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runners.lifecycle.services import QUEUED_NO_INTERRUPT, QUEUED_NO_STEERING, QUEUED_STEER_BEHIND, run_create
from runners.models import Run
from runners.orchestrator.admission import run_claim
from tests.factories import AgentBindingFactory, RunnerDescriptorFactory
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch) -> dict[str, list[Any]]:
    """What would have reached the broker or Redis: immediate sends, delayed sends, cancels, steered inputs."""
    record: dict[str, list[Any]] = {"now": [], "at": [], "cancel": [], "steer": []}
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: record["now"].append(run_id))
    monkeypatch.setattr(
        "runners.lifecycle.services.run_dispatch_at", lambda *, run_id, eta: record["at"].append((run_id, eta))
    )
    monkeypatch.setattr(
        "runners.orchestrator.admission.run_dispatch_at", lambda *, run_id, eta: record["at"].append((run_id, eta))
    )
    monkeypatch.setattr("runners.lifecycle.services.cancel_notify", lambda **kw: record["cancel"].append(kw))
    monkeypatch.setattr("runners.lifecycle.services.steer_notify", lambda **kw: record["steer"].append(kw))
    return record


def _runner(**capabilities: bool) -> str:
    descriptor = RunnerDescriptorFactory.create(capabilities=capabilities)
    descriptor.manifest = {
        "id": descriptor.runner_id,
        "name": "default",
        "label": {"en_US": "burst"},
        "capabilities": capabilities,
    }
    descriptor.save()
    return descriptor.runner_id


def _message(binding, text: str, conversation_id: str = "c1", **input_extra: Any) -> EventLog:
    n = EventLog.objects.count()
    return EventLog.objects.create(
        workspace=binding.workspace, event_id=f"e{n}", event_type="message.received", source="api",
        conversation_id=conversation_id, input={"text": text, **input_extra},
    )  # fmt: skip


def _post(binding, text: str, **kwargs: Any) -> Run:
    return run_create(event=_message(binding, text, **kwargs), binding=binding, observer=False)


def _age(run: Run, seconds: float, *, window: bool = True) -> None:
    """Move the run's creation (and its window, unless told not to) into the past, as if `seconds` had gone
    by (since its latest message, when only the creation moves)."""
    shift = timedelta(seconds=seconds)
    moved = {"not_before": run.not_before - shift} if window and run.not_before is not None else {}
    Run.objects.filter(pk=run.pk).update(created_at=run.created_at - shift, **moved)


def test_merge_folds_messages_within_the_window_into_one_run(sent, django_capture_on_commit_callbacks):
    binding = AgentBindingFactory.create(concurrency_policy="merge", merge_window_seconds=1.5)
    with django_capture_on_commit_callbacks(execute=True):
        first = _post(binding, "one")
        second = _post(binding, "two")
        third = _post(binding, "three")
    assert first.pk == second.pk == third.pk
    assert Run.objects.count() == 1
    first.refresh_from_db()
    assert first.status == Run.Status.QUEUED
    assert first.input_events == list(
        EventLog.objects.filter(event_id__in=["e1", "e2"]).order_by("id").values_list("pk", flat=True)
    )
    # Sent once, for the end of its window, never at once.
    assert sent["now"] == []
    assert [run_id for run_id, _ in sent["at"]] == [str(first.run_id)]
    assert first.not_before is not None
    assert first.not_before > timezone.now()


def test_each_message_restarts_the_window_up_to_a_cap(sent):
    binding = AgentBindingFactory.create(concurrency_policy="merge", merge_window_seconds=1.0)
    run = _post(binding, "one")
    _age(run, 0.5)
    run.refresh_from_db()
    _post(binding, "two")
    run.refresh_from_db()
    assert run.not_before is not None
    assert run.not_before - timezone.now() > timedelta(seconds=0.9)  # a whole window again
    # A user who keeps typing: the run starts at the latest four windows after the first message.
    _age(run, 3.5, window=False)
    run.refresh_from_db()
    _post(binding, "three")
    run.refresh_from_db()
    assert run.not_before == run.created_at + timedelta(seconds=4)
    assert len(run.input_events) == 2


def test_a_message_after_the_window_closed_gets_a_run_of_its_own(sent):
    binding = AgentBindingFactory.create(concurrency_policy="merge")
    first = _post(binding, "one")
    _age(first, 5)
    second = _post(binding, "two")
    elsewhere = _post(binding, "three", conversation_id="c2")
    assert len({first.pk, second.pk, elsewhere.pk}) == 3
    first.refresh_from_db()
    assert first.input_events == []


def test_merge_keeps_collecting_while_an_earlier_run_is_running(sent):
    binding = AgentBindingFactory.create(concurrency_policy="merge")
    running = _post(binding, "one")
    Run.objects.filter(pk=running.pk).update(status=Run.Status.RUNNING)
    waiting = _post(binding, "two")
    assert waiting.pk != running.pk
    _age(waiting, 60)  # its window is long over, but it cannot start before the running run ends
    assert _post(binding, "three").pk == waiting.pk
    waiting.refresh_from_db()
    assert len(waiting.input_events) == 1


def test_a_claimed_merge_run_takes_every_folded_message_as_one_input(sent):
    binding = AgentBindingFactory.create(concurrency_policy="merge", runner_id=_runner(interrupt=True))
    run = _post(binding, "one", attachments=[{"artifact_id": "a1", "name": "a.png", "mime_type": "image/png"}])
    _post(binding, "two")
    _post(binding, "three", contents=[{"type": "text", "text": "three"}])
    # Too early: not claimed, sent again for the end of its window.
    assert run_claim(run_id=str(run.run_id), owner="test", lease_seconds=10) is None
    assert sent["at"][-1][0] == str(run.run_id)
    _age(Run.objects.get(pk=run.pk), 10)
    claimed = run_claim(run_id=str(run.run_id), owner="test", lease_seconds=10)
    assert claimed is not None
    given = claimed.built.request["context"]
    assert given["input"]["text"] == "one\ntwo\nthree"
    assert [a["artifact_id"] for a in given["input"]["attachments"]] == ["a1"]
    assert [(part["type"], part["text"]) for part in given["input"]["contents"]] == [("text", "three")]
    assert given["metadata"]["merged_event_ids"] == ["e0", "e1", "e2"]
    # Started: the next message waits for a run of its own.
    later = _post(binding, "four")
    assert later.pk != run.pk
    assert later.status == Run.Status.QUEUED


def test_interrupt_queues_instead_when_the_runner_declares_no_interrupt(sent):
    binding = AgentBindingFactory.create(concurrency_policy="interrupt", runner_id=_runner(interrupt=False))
    first = _post(binding, "one")
    Run.objects.filter(pk=first.pk).update(status=Run.Status.RUNNING)
    second = _post(binding, "two")
    first.refresh_from_db()
    assert first.status == Run.Status.RUNNING
    assert first.cancel_requested_at is None
    assert second.status == Run.Status.QUEUED
    assert second.status_reason == QUEUED_NO_INTERRUPT
    # And the claim keeps it waiting behind the run it did not interrupt.
    assert run_claim(run_id=str(second.run_id), owner="test", lease_seconds=10) is None
    Run.objects.filter(pk=first.pk).update(status=Run.Status.COMPLETED)
    assert run_claim(run_id=str(second.run_id), owner="test", lease_seconds=10) is not None


def test_interrupt_still_cancels_a_runner_that_declares_it(sent):
    binding = AgentBindingFactory.create(concurrency_policy="interrupt", runner_id=_runner(interrupt=True))
    first = _post(binding, "one")
    Run.objects.filter(pk=first.pk).update(status=Run.Status.RUNNING)
    second = _post(binding, "two")
    first.refresh_from_db()
    assert first.cancel_reason == "interrupted by a newer message"
    assert second.status_reason == ""


def test_steer_falls_back_to_queue_when_the_runner_takes_no_input_while_running(sent):
    binding = AgentBindingFactory.create(concurrency_policy="steer", runner_id=_runner(interrupt=True))
    first = _post(binding, "one")
    Run.objects.filter(pk=first.pk).update(status=Run.Status.RUNNING)
    second = _post(binding, "two")
    assert second.pk != first.pk
    assert second.status_reason == QUEUED_NO_STEERING
    assert sent["steer"] == []
    assert run_claim(run_id=str(second.run_id), owner="test", lease_seconds=10) is None  # waits its turn


def test_steer_hands_the_message_to_the_running_run_of_a_runner_that_takes_it(sent, django_capture_on_commit_callbacks):
    binding = AgentBindingFactory.create(concurrency_policy="steer", runner_id=_runner(steering=True))
    idle = _post(binding, "nothing running yet")
    assert idle.status == Run.Status.QUEUED
    assert idle.input_events == []
    Run.objects.filter(pk=idle.pk).update(status=Run.Status.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        steered = _post(binding, "and also this")
    assert steered.pk == idle.pk
    event = EventLog.objects.get(event_id="e1")
    assert Run.objects.get(pk=idle.pk).input_events == [event.pk]
    assert sent["steer"] == [{"run_id": str(idle.run_id), "event_pk": event.pk}]
    # A run being cancelled takes nothing more: the message queues.
    Run.objects.filter(pk=idle.pk).update(cancel_requested_at=timezone.now())
    behind = _post(binding, "too late")
    assert behind.pk != idle.pk
    assert behind.status_reason == QUEUED_STEER_BEHIND


def test_the_runs_api_and_admin_show_what_a_run_took_and_when_it_may_start(sent, api_client_for, admin_client):
    from django.urls import reverse

    binding = AgentBindingFactory.create(concurrency_policy="merge", merge_window_seconds=1.5)
    merged = _post(binding, "one")
    _post(binding, "two")
    _post(binding, "three")
    client = api_client_for(binding.workspace)

    body = client.get(f"/api/v1/runs/{merged.run_id}").json()
    [listed] = client.get("/api/v1/runs").json()["items"]

    assert body["input_events"] == listed["input_events"] == ["e1", "e2"]  # the later messages, by event id
    assert body["event_id"] == "e0"
    assert body["not_before"] is not None
    assert body["status_reason"] == ""
    page = admin_client.get(reverse("admin:runners_run_change", args=[merged.pk])).content.decode()
    assert ">e1</a>, <a" in page
    assert ">e2</a>" in page


def test_the_runs_api_says_why_a_steer_message_queued(sent, api_client_for):
    binding = AgentBindingFactory.create(concurrency_policy="steer", runner_id=_runner(interrupt=True))
    running = _post(binding, "one")
    Run.objects.filter(pk=running.pk).update(status=Run.Status.RUNNING)
    queued = _post(binding, "two")

    body = api_client_for(binding.workspace).get(f"/api/v1/runs/{queued.run_id}").json()

    assert (body["status"], body["status_reason"], body["input_events"]) == ("queued", QUEUED_NO_STEERING, [])
