"""The lifecycle of every qa-runner behaviour through a real worker, runtime, PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from runners.models import Run, RunEvent
from tests.processes import post_message, wait_terminal
from transcripts.models import StateEntry, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


def _events(run: Run) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run=run).order_by("seq"))


def _assistant_items(run: Run) -> list[TranscriptItem]:
    return list(TranscriptItem.objects.filter(run_id=run.run_id, role=TranscriptItem.Role.ASSISTANT))


def test_ok_run_completes_with_its_reply_in_the_ledger_and_transcript(worker, qa_binding):
    # given a binding of the qa-runner
    binding = qa_binding()
    # when a message arrives
    run = wait_terminal(post_message(binding, "hello"))
    # then the run completed with the runner's reply, persisted once
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.output == "QA_OK:hello"
    events = _events(run)
    assert [e.type for e in events] == ["message.completed", "run.completed"]
    assert [e.seq for e in events] == [1, 2]
    assert run.last_seq == 2
    [item] = _assistant_items(run)
    assert item.content == "QA_OK:hello"
    assert run.attempts == 1
    assert run.lease_expires_at is None
    assert run.finished_at is not None


def test_stream_run_persists_ordered_deltas_that_add_up_to_the_reply(worker, qa_binding):
    binding = qa_binding()
    run = wait_terminal(post_message(binding, "qa:stream:8 go"))
    assert run.status == Run.Status.COMPLETED, run.error
    events = _events(run)
    types = [e.type for e in events]
    assert types[-2:] == ["message.completed", "run.completed"]
    assert set(types[:-2]) == {"message.delta"}
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    streamed = "".join(e.data["chunk"]["content"] for e in events if e.type == "message.delta")
    assert streamed == events[-2].data["message"]["content"] == run.output
    assert run.output == "".join(f"chunk{i} " for i in range(8))


def test_a_reply_with_a_nul_character_is_kept_with_a_replacement_character(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "qa:nul end"))

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.output == "QA_NUL:\ufffdend"
    assert [e.type for e in _events(run)] == ["message.delta", "message.completed", "run.completed"]
    [item] = _assistant_items(run)
    assert item.content == "QA_NUL:\ufffdend"


def test_empty_run_completes_without_a_reply(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "qa:empty"))
    assert run.status == Run.Status.COMPLETED
    assert [e.type for e in _events(run)] == ["run.completed"]
    assert run.output == ""
    assert _assistant_items(run) == []


def test_malformed_result_fails_the_run_as_invalid(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "qa:malformed"))
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "runner.invalid_result"
    assert [e.type for e in _events(run)] == ["run.failed"]


def test_controlled_failure_is_recorded_with_the_runners_error(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "qa:fail"))
    assert run.status == Run.Status.FAILED
    assert run.status_reason == "runner.error"
    assert run.error["code"] == "runner.error"
    assert run.error["message"] == "qa-runner failed on purpose"
    assert _assistant_items(run) == []


def test_runner_exception_fails_the_run(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "qa:raise"))
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "runner.exception"
    assert "QARunnerError" in run.error["message"]


def test_slow_runner_past_its_deadline_ends_in_timeout_and_is_stopped(worker, qa_binding):
    binding = qa_binding(timeout_seconds=1)
    run = wait_terminal(post_message(binding, "qa:slow:3 zz"), timeout=20)
    assert run.status == Run.Status.TIMEOUT
    assert run.error["code"] == "runner.timeout"
    assert run.error["retryable"] is True
    # The runner was stopped: its late reply never reaches the ledger or the transcript.
    worker.wait_for_log(f"run {run.run_id}: deadline reached, runner cancelled")
    assert [e.type for e in _events(run)] == ["run.failed"]
    assert _assistant_items(run) == []


def test_echo_context_inlines_the_current_event_and_cursors_but_no_history(worker, qa_binding):
    binding = qa_binding()
    first = wait_terminal(post_message(binding, "first message"))
    [earlier_reply] = _assistant_items(first)

    run = wait_terminal(post_message(binding, "qa:echo_context now"))

    assert run.status == Run.Status.COMPLETED, run.error
    ctx = json.loads(run.output)
    current_input = TranscriptItem.objects.get(event_id=run.event_id, role="user")
    assert ctx["bootstrap"] is None
    assert ctx["input"]["text"] == "qa:echo_context now"
    assert ctx["context"]["inline_policy"]["mode"] == "current_event"
    assert ctx["context"]["inline_policy"]["delivered_count"] == 0
    assert ctx["context"]["has_history_before"] is True
    assert ctx["context"]["latest_cursor"] == str(earlier_reply.id)
    assert ctx["context"]["transcript_seq"] == current_input.id
    assert ctx["event"]["event_id"] == run.event.event_id
    assert ctx["conversation"]["conversation_id"] == "conv-1"
    assert ctx["actor"]["actor_id"] == "user-1"
    assert ctx["runtime"]["deadline_at"] == pytest.approx(run.deadline_at.timestamp())
    assert "first message" not in run.output
    assert ctx["context"]["available_apis"] == run.authorization["available_apis"]


def test_state_behaviour_round_trips_through_the_state_store(worker, qa_binding):
    binding = qa_binding()
    first = wait_terminal(post_message(binding, "qa:state"))
    second = wait_terminal(post_message(binding, "qa:state"))
    other_conversation = wait_terminal(post_message(binding, "qa:state", conversation_id="conv-2"))

    assert (first.output, second.output, other_conversation.output) == ("QA_STATE:1", "QA_STATE:2", "QA_STATE:1")
    entry = StateEntry.objects.get(key="qa.counter", scope_key__contains="conv-1")
    assert entry.value == 2
    assert entry.scope == "conversation"
    assert entry.scope_key.startswith("conversation:")
    assert binding.binding_id in entry.scope_key
    # state.updated is written to the state store and kept in the run's ledger for clients to see.
    updates = [e.data for e in _events(second) if e.type == "state.updated"]
    assert updates == [{"scope": "conversation", "key": "qa.counter", "value": 2}]


def test_artifact_behaviour_stores_the_blob_and_names_it_in_the_ledger(worker, qa_binding):
    from artifacts.models import Artifact
    from artifacts.services import artifact_read_bytes

    run = wait_terminal(post_message(qa_binding(), "qa:artifact hello"))

    assert run.status == Run.Status.COMPLETED, run.error
    [created] = [e.data for e in _events(run) if e.type == "artifact.created"]
    assert "content_base64" not in created
    artifact = Artifact.objects.get(artifact_id=created["artifact_id"])
    assert artifact_read_bytes(artifact=artifact) == b"QA_ARTIFACT:hello"
    assert (artifact.run_id, artifact.conversation_id, created["size"]) == (run.run_id, run.conversation_id, 17)


def test_proxy_report_shows_granted_apis_working_and_the_others_refused(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "qa:proxy"))
    assert run.status == Run.Status.COMPLETED, run.error
    report = json.loads(run.output)
    granted = (
        [f"state.{m}" for m in ("get", "set", "delete", "list")]
        + [f"storage.{m}" for m in ("get", "set", "delete", "list")]
        + ["history.page", "history.search", "events.get", "events.page"]
        # uploads are open to every run while the workspace's upload limit is above 0 (the default)
        + [f"artifacts.upload_{step}" for step in ("open", "chunk", "finish", "abort")]
    )
    for name in granted:
        assert report[name] == {"ok": True, "code": None}, name
    others = {name: r for name, r in report.items() if name not in granted}
    assert others
    for name, result in others.items():
        assert (result["ok"], result["code"] in {"not_found", "unauthorized"}) == (False, True), name
    assert report["artifacts.metadata"]["code"] == "not_found"  # readable API, no such artifact


def test_binding_to_a_vanished_runner_fails_with_runner_not_found(worker, qa_binding):
    binding = qa_binding(runner_id="plugin:nobody/gone/default")
    run = wait_terminal(post_message(binding, "hello"))
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "runner.not_found"


def test_observer_runs_beside_but_writes_no_reply(worker, qa_binding):
    binding = qa_binding(delivery_policy={"enable_reply": False})
    run = wait_terminal(post_message(binding, "watching"))
    assert run.is_observer
    assert run.status == Run.Status.COMPLETED
    assert run.output == "QA_OK:watching"
    assert _assistant_items(run) == []


def test_listeners_see_running_first_then_the_events_in_order_then_the_end(worker, qa_binding):
    # `running` is published beside the runtime call; nothing of the run may overtake it.
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from runners.live.publish import conversation_group

    binding = qa_binding()
    layer = get_channel_layer()
    channel = f"test.order.{uuid.uuid4().hex}"
    conversation = f"order-{uuid.uuid4().hex[:8]}"
    group = conversation_group(workspace_id=binding.workspace_id, conversation_id=conversation)
    async_to_sync(layer.group_add)(group, channel)
    try:
        run = wait_terminal(post_message(binding, "qa:stream:5 go", conversation_id=conversation))

        async def collect() -> list[tuple[str, object]]:
            received: list[tuple[str, object]] = []
            while not received or received[-1] != ("status", "completed"):
                message = await asyncio.wait_for(layer.receive(channel), 10)
                if message["type"] == "run.status":
                    received.append(("status", message["status"]))
                else:
                    received.append(("event", message["seq"]))
            return received

        received = async_to_sync(collect)()
    finally:
        async_to_sync(layer.group_discard)(group, channel)

    assert run.status == Run.Status.COMPLETED
    assert received[0] == ("status", "running")
    assert received[1:-1] == [("event", seq) for seq in range(1, run.last_seq + 1)]
