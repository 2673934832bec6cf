"""history_page / history_search / event_get / event_page through the real handlers."""

from __future__ import annotations

import pytest

from tests.handlers.conftest import post_event
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


def _texts(page: dict) -> list[str]:
    return [item["content"] for item in page["items"]]


def _history(workspace, conversation_id: str, count: int) -> list[TranscriptItem]:
    return [post_event(workspace, conversation_id, f"message {i}")[1] for i in range(count)]


def test_backward_pages_walk_to_the_oldest_item_in_chronological_order(host_run):
    # given a conversation with 5 earlier messages and the current input
    first = host_run(text="seed")
    _history(first.workspace, first.conversation_id, 5)
    run = host_run(workspace=first.workspace, text="now")
    # when the runner pages backward, 2 at a time, from the newest item
    page1 = run.call("history_page", limit=2)
    page2 = run.call("history_page", limit=2, before_cursor=page1["next_cursor"])
    # then each page is oldest-first and the pages continue without overlap
    assert _texts(page1) == ["message 4", "now"]
    assert _texts(page2) == ["message 2", "message 3"]
    assert page1["has_more"] is True
    assert page1["prev_cursor"] == page1["items"][-1]["cursor"]


def test_forward_page_starts_at_the_oldest_item(host_run):
    run = host_run(text="first")
    _history(run.workspace, run.conversation_id, 3)
    page = run.call("history_page", direction="forward", limit=2)
    assert _texts(page) == ["first", "message 0"]
    rest = run.call("history_page", direction="forward", after_cursor=page["next_cursor"], limit=10)
    assert _texts(rest) == ["message 1", "message 2"]
    assert rest["has_more"] is False
    assert rest["next_cursor"] is None


def test_latest_cursor_is_the_newest_item_before_the_current_input(host_run):
    # given earlier messages, then the run's own input
    seed = host_run(text="old 1")
    post_event(seed.workspace, seed.conversation_id, "old 2")
    run = host_run(workspace=seed.workspace, text="current")
    access = run.built.context.context
    # then latest_cursor names "old 2"; the current input is after it
    after = run.call("history_page", direction="forward", after_cursor=access.latest_cursor)
    assert _texts(after) == ["current"]
    # and the current input's own cursor reads all history before it, latest_cursor's item newest
    before = run.call("history_page", before_cursor=str(access.transcript_seq))
    assert _texts(before) == ["old 1", "old 2"]
    assert before["items"][-1]["cursor"] == access.latest_cursor


def test_page_limit_is_clamped_to_100(host_run):
    run = host_run()
    _history(run.workspace, run.conversation_id, 120)
    page = run.call("history_page", limit=500)
    assert len(page["items"]) == 100
    assert page["has_more"] is True


def test_artifacts_are_included_only_on_request(host_run):
    run = host_run()
    ref = {"artifact_id": "a1", "name": "x.txt", "mime_type": "text/plain", "size": 1}
    TranscriptItem.objects.filter(pk=run.built.context.context.transcript_seq).update(artifacts=[ref])
    without = run.call("history_page")
    with_refs = run.call("history_page", include_artifacts=True)
    assert without["items"][-1]["artifacts"] == []
    assert with_refs["items"][-1]["artifacts"][0]["artifact_id"] == "a1"


def test_an_item_shows_its_event_actor_parts_and_run(host_run):
    # given the run's input item with an actor and content parts, and an assistant reply of an earlier run
    earlier = host_run(text="earlier")
    TranscriptItem.objects.create(
        workspace=earlier.workspace, conversation_id=earlier.conversation_id, role="assistant", content="reply",
        run_id=earlier.run.run_id, runner_id=earlier.run.runner_id,
    )  # fmt: skip
    run = host_run(workspace=earlier.workspace, text="look")
    current = TranscriptItem.objects.get(pk=run.built.context.context.transcript_seq)
    parts = [{"type": "text", "text": "look"}]
    TranscriptItem.objects.filter(pk=current.pk).update(
        contents=parts, actor={"actor_type": "user", "actor_id": "u1", "actor_name": "Ada"}
    )
    # when the runner reads the page
    items = run.call("history_page")["items"]
    # then each item carries what it came from
    reply, mine = items[-2], items[-1]
    assert (reply["role"], reply["run_id"], reply["runner_id"]) == (
        "assistant", str(earlier.run.run_id), earlier.run.runner_id
    )  # fmt: skip
    assert mine["event_id"] == run.run.event.event_id == EventLog.objects.get(transcript_items=current).event_id
    assert mine["actor"]["actor_name"] == "Ada"
    assert [{k: v for k, v in part.items() if v is not None} for part in mine["contents"]] == parts
    assert mine["created_at"].startswith(str(current.created_at.year))


def test_another_conversation_is_not_found_and_its_cursors_find_nothing(host_run):
    run = host_run(conversation_id="mine")
    _, foreign = post_event(run.workspace, "theirs", "secret")
    refused = run.refused("history_page", conversation_id="theirs")
    assert refused.code == "not_found"
    page = run.call("history_page", after_cursor=str(foreign.pk - 1), direction="forward")
    assert "secret" not in _texts(page)


def test_a_malformed_cursor_is_an_invalid_argument(host_run):
    run = host_run()
    assert (run.refused("history_page", before_cursor="abc")).code == "invalid_argument"


def test_a_run_in_a_thread_reads_only_that_thread(host_run):
    seed = host_run(conversation_id="c", thread_id="t1", text="in thread")
    post_event(seed.workspace, "c", "main line")
    run = host_run(workspace=seed.workspace, conversation_id="c", thread_id="t1", text="again")
    page = run.call("history_page")
    assert _texts(page) == ["in thread", "again"]
    assert (run.refused("history_page", thread_id="t2")).code == "not_found"


def test_history_page_needs_the_manifest_permission(host_run):
    run = host_run(permissions={"history": ["search"]})
    assert (run.refused("history_page")).code == "unauthorized"


def test_search_ranks_matches_of_the_runs_conversation_only(host_run):
    run = host_run(conversation_id="mine", text="unrelated")
    post_event(run.workspace, "mine", "the database password is hunter2")
    post_event(run.workspace, "mine", "database migration done; database ok")
    post_event(run.workspace, "theirs", "database in another conversation")
    found = run.call("history_search", query="database", top_k=10)
    contents = [hit["item"]["content"] for hit in found["items"]]
    assert set(contents) == {"the database password is hunter2", "database migration done; database ok"}
    assert contents[0] == "database migration done; database ok"  # two occurrences rank first
    assert all(hit["snippet"] for hit in found["items"])
    # filters cannot widen the scope
    refused = run.refused("history_search", query="database", filters={"conversation_id": "theirs"})
    assert refused.code == "not_found"


def test_search_top_k_is_clamped_to_50(host_run):
    run = host_run()
    for i in range(60):
        post_event(run.workspace, run.conversation_id, f"needle {i}")
    found = run.call("history_search", query="needle", top_k=80)
    assert len(found["items"]) == 50


def test_event_get_returns_the_projection_with_raw_payloads_only_as_refs(host_run):
    run = host_run()
    event = EventLog.objects.get(pk=run.run.event_id)
    event.raw_ref = {"artifact_id": "raw-1", "size": 99999, "mime_type": "application/json"}
    event.data = {"raw": {"big": "payload"}}
    event.save()
    record = run.call("event_get", event_id=event.event_id)
    assert record["event_id"] == event.event_id
    assert record["input"]["text"] == "hello"
    assert record["raw_ref"]["artifact_id"] == "raw-1"
    assert "data" not in record
    assert "payload" not in str(record)


def test_event_of_another_conversation_is_not_found(host_run):
    run = host_run(conversation_id="mine")
    other, _ = post_event(run.workspace, "theirs", "x")
    assert (run.refused("event_get", event_id=other.event_id)).code == "not_found"
    assert (run.refused("event_get", event_id="no-such-event")).code == "not_found"


def test_event_page_walks_the_conversations_events(host_run):
    run = host_run(text="e0")
    for i in range(1, 4):
        post_event(run.workspace, run.conversation_id, f"e{i}")
    post_event(run.workspace, "elsewhere", "x")
    newest = run.call("event_page", limit=2)
    older = run.call("event_page", limit=2, before_cursor=newest["next_cursor"])
    assert [i["input"]["text"] for i in newest["items"]] == ["e2", "e3"]
    assert [i["input"]["text"] for i in older["items"]] == ["e0", "e1"]
    forward = run.call("event_page", after_cursor=older["items"][0]["cursor"], limit=100)
    assert [i["input"]["text"] for i in forward["items"]] == ["e1", "e2", "e3"]
    assert len((run.call("event_page", limit=1000))["items"]) == 4
