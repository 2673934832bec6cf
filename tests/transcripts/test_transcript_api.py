"""GET /api/v1/conversations/{conversation_id}/transcript pages newest first by an id cursor."""

from __future__ import annotations

import pytest

from tests.factories import WorkspaceFactory
from tests.gateway.support import field_errors_of, message, post_event
from transcripts.models import TranscriptItem

pytestmark = pytest.mark.django_db


def transcript(client, conversation_id: str, **query):
    return client.get(f"/api/v1/conversations/{conversation_id}/transcript", query)


def test_the_transcript_lists_the_conversation_newest_first(api_client, workspace):
    for text in ["one", "two", "three"]:
        post_event(api_client, message(text, conversation_id="c-1"))
    post_event(api_client, message("elsewhere", conversation_id="c-2"))

    page = transcript(api_client, "c-1").json()

    assert page["conversation_id"] == "c-1"
    assert [i["content"] for i in page["items"]] == ["three", "two", "one"]
    assert {i["role"] for i in page["items"]} == {"user"}
    assert page["next_before"] is None


def test_walking_the_pages_returns_every_item_once(api_client, workspace):
    texts = [f"message {n}" for n in range(7)]
    for text in texts:
        post_event(api_client, message(text, conversation_id="c-long"))

    seen: list[str] = []
    before = None
    while True:
        query = {"limit": 3, **({"before": before} if before else {})}
        page = transcript(api_client, "c-long", **query).json()
        assert len(page["items"]) <= 3
        seen.extend(i["content"] for i in page["items"])
        before = page["next_before"]
        if before is None:
            break

    assert seen == list(reversed(texts))


def test_items_link_back_to_their_event(api_client, workspace):
    post_event(api_client, message("hi", event_id="evt-7", conversation_id="c-1", thread_id="t-1"))

    [item] = transcript(api_client, "c-1").json()["items"]

    assert item["event_id"] == "evt-7"
    assert item["thread_id"] == "t-1"
    assert item["run_id"] is None
    assert item["id"] == TranscriptItem.objects.get().id


def test_assistant_items_show_their_run(api_client, workspace):
    post_event(api_client, message("hi", conversation_id="c-1"))
    TranscriptItem.objects.create(
        workspace=workspace, conversation_id="c-1", role="assistant", content="hello!",
        run_id="6f1c2c1e-8d4e-4a55-9a61-0c1f0c7b7a11", runner_id="plugin:a/b/c",
    )

    first = transcript(api_client, "c-1").json()["items"][0]

    assert (first["role"], first["content"], first["runner_id"]) == ("assistant", "hello!", "plugin:a/b/c")
    assert first["run_id"] == "6f1c2c1e-8d4e-4a55-9a61-0c1f0c7b7a11"


def test_a_conversation_id_with_slashes_and_colons_is_addressable(api_client, workspace):
    post_event(api_client, message("hi", conversation_id="team/sales:2026"))

    page = transcript(api_client, "team/sales:2026").json()

    assert [i["content"] for i in page["items"]] == ["hi"]


def test_another_workspaces_conversation_shows_nothing(api_client, api_client_for, workspace):
    post_event(api_client, message("private", conversation_id="c-1"))

    page = transcript(api_client_for(WorkspaceFactory.create()), "c-1").json()

    assert page["items"] == []


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": 101}, "limit"), ({"limit": 0}, "limit"), ({"limit": "ten"}, "limit"), ({"before": "x"}, "before"),
     ({"before": 0}, "before")],
)
def test_invalid_paging_is_refused(api_client, workspace, query, field):
    assert field in field_errors_of(transcript(api_client, "c-1", **query))
