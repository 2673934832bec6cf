"""Property: walking a conversation's history from any cursor, in either direction, visits every item
exactly once and in order — including items appended while the walk is under way."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import WorkspaceFactory
from transcripts.models import TranscriptItem
from transcripts.selectors import history_page_rows

_conversations = itertools.count()


def _append(workspace, conversation_id: str, count: int) -> list[int]:
    return [
        TranscriptItem.objects.create(workspace=workspace, conversation_id=conversation_id, role="user", content="m").pk
        for _ in range(count)
    ]


def _page(workspace, conversation_id: str, *, before=None, after=None, forward: bool, limit: int):
    return history_page_rows(
        workspace_id=workspace.pk, conversation_id=conversation_id, thread_id=None,
        before=before, after=after, forward=forward, limit=limit,
    )  # fmt: skip


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    initial=st.integers(min_value=0, max_value=30),
    start=st.integers(min_value=0, max_value=30),
    limit=st.integers(min_value=1, max_value=7),
    appends=st.lists(st.integers(min_value=0, max_value=4), max_size=8),
)
def test_walking_from_any_cursor_visits_every_item_once_in_order(initial, start, limit, appends):
    # given a conversation (plus noise in another one) and a starting cursor somewhere in it
    workspace = WorkspaceFactory.create(slug="walk")
    conversation_id = f"walk-{next(_conversations)}"
    ids = _append(workspace, conversation_id, initial)
    _append(workspace, f"{conversation_id}-other", 2)
    cursor = ids[min(start, len(ids) - 1)] if ids else 0
    pending = list(appends)

    # when walking forward from the cursor, items are appended between pages
    seen_forward: list[int] = []
    after = cursor
    while True:
        page = _page(workspace, conversation_id, after=after, forward=True, limit=limit)
        seen_forward += [row.pk for row in page.rows]
        if page.rows:
            after = page.rows[-1].pk
        if pending:
            ids += _append(workspace, conversation_id, pending.pop(0))
            continue
        if not page.has_more and not page.rows:
            break

    # and walking backward from the same cursor (inclusive of nothing newer)
    seen_backward: list[int] = []
    before = cursor + 1 if ids else None
    while before is not None:
        page = _page(workspace, conversation_id, before=before, forward=False, limit=limit)
        seen_backward = [row.pk for row in page.rows] + seen_backward
        before = page.rows[0].pk if page.has_more else None

    # then together they are the whole conversation, each item once, in order
    assert seen_forward == [i for i in ids if i > cursor]
    assert seen_backward == [i for i in ids if i <= cursor]
    assert seen_backward + seen_forward == sorted(ids)
