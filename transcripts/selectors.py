"""Reads of host facts for the REST API, admin and the context APIs: events and conversation transcripts.

Transcript pages use the item id as the cursor (`before`), newest first, on the
(workspace, conversation_id, id) index — never OFFSET, so a page costs the same at any depth.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
from django.db import connection
from django.db.models import F, Func, QuerySet

from bindings.models import Workspace
from transcripts.models import EventLog, TranscriptItem
from transcripts.sql import history_rows

PAGE_LIMIT_MAX = 100


@dataclass(frozen=True)
class TranscriptPage:
    items: list[TranscriptItem]
    # Pass as `before` for the next (older) page; None when this page reaches the beginning.
    next_before: int | None


def keys_page(rows: QuerySet[Any], *, prefix: str | None, limit: int, cap: int) -> tuple[list[str], bool]:
    """The `key`s of a state or storage scope in order — at most `limit`, clamped to 1..`cap`, from
    `prefix` when given — and whether more follow (one row more than asked, no COUNT)."""
    limit = max(1, min(limit, cap))
    if prefix:
        rows = rows.filter(key__startswith=prefix)
    keys = list(rows.order_by("key").values_list("key", flat=True)[: limit + 1])
    return keys[:limit], len(keys) > limit


def event_get(*, workspace: Workspace, event_id: str) -> EventLog | None:
    return EventLog.objects.filter(workspace=workspace, event_id=event_id).select_related("bot").first()


def transcript_page(
    *, workspace: Workspace, conversation_id: str, before: int | None = None, limit: int = 50
) -> TranscriptPage:
    limit = max(1, min(limit, PAGE_LIMIT_MAX))
    queryset = TranscriptItem.objects.filter(workspace=workspace, conversation_id=conversation_id)
    if before is not None:
        queryset = queryset.filter(id__lt=before)
    # One row more than asked tells whether an older page exists without a COUNT.
    rows = list(queryset.select_related("event").order_by("-id")[: limit + 1])
    items = rows[:limit]
    return TranscriptPage(items=items, next_before=items[-1].id if len(rows) > limit else None)


# --- context APIs (hostapi): history pages, history search and event pages ----------------
#
# Every read below is scoped to one workspace and one conversation before anything else, so a cursor
# or an id from another conversation simply finds nothing. Cursors are row ids; pages walk the
# (workspace, conversation_id, id) indexes with a LIMIT of one extra row (no OFFSET, no COUNT).

HISTORY_SEARCH_TOP_K_MAX = 50
# PostgreSQL text search configuration: `simple` (no stemming, no stop words) behaves the same for every
# language a chat may use; text it cannot split into words (e.g. CJK) falls back to substring search.
SEARCH_CONFIG = "simple"


@dataclass(frozen=True)
class RowPage:
    rows: list[Any]
    """In chronological order (oldest first), whatever the direction."""
    has_more: bool
    """More rows exist beyond this page in the direction that was walked."""


def _walk(queryset: QuerySet[Any], *, before: int | None, after: int | None, forward: bool, limit: int) -> RowPage:
    if before is not None:
        queryset = queryset.filter(id__lt=before)
    if after is not None:
        queryset = queryset.filter(id__gt=after)
    rows = list(queryset.order_by("id" if forward else "-id")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    if not forward:
        rows.reverse()
    return RowPage(rows=rows, has_more=has_more)


@dataclass(frozen=True, slots=True)
class TranscriptRow:
    """The columns of a transcript item that its context-API projection (`transcript_item_record`)
    shows, with the id of the event it came from."""

    pk: int
    conversation_id: str
    thread_id: str
    role: str
    content: str
    contents: Any
    artifacts: Any
    event_key: str | None
    run_id: uuid.UUID | None
    runner_id: str
    actor: Any
    created_at: datetime

    @classmethod
    def of(cls, item: TranscriptItem) -> TranscriptRow:
        """The row of an item loaded with `select_related("event")`."""
        return cls(
            item.pk, item.conversation_id, item.thread_id, item.role, item.content, item.contents, item.artifacts,
            item.event.event_id if item.event_id is not None and item.event is not None else None,
            item.run_id, item.runner_id, item.actor, item.created_at,
        )  # fmt: skip


def _json(value: Any) -> Any:
    # Rows read in binary (PostgreSQL) have their JSON decoded by the driver; elsewhere it is text, which
    # the ORM would have decoded in `JSONField.from_db_value`.
    return json.loads(value) if isinstance(value, str | bytes) else value


def _history_row(values: tuple[Any, ...]) -> TranscriptRow:
    pk, conversation, thread, role, content, contents, artifacts, event_key, run_id, runner, actor, created = values
    # SQLite keeps UUIDs as 32 hex digits.
    run_uuid = run_id if run_id is None or isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    return TranscriptRow(
        pk, conversation, thread, role, content, _json(contents), _json(artifacts), event_key, run_uuid, runner,
        _json(actor), created,
    )  # fmt: skip


def history_page_rows(
    *,
    workspace_id: int,
    conversation_id: str,
    thread_id: str | None,
    before: int | None,
    after: int | None,
    forward: bool,
    limit: int,
) -> RowPage:
    """A page of transcript items of one conversation (and thread, when given), `limit` ≤ 100, as
    `TranscriptRow`s.

    A runner may page through a long conversation call after call, so this is one prepared statement
    of the columns the projection shows, rather than model instances with the whole event row.
    """
    limit = max(1, min(limit, PAGE_LIMIT_MAX))
    fetched = history_rows(
        workspace_id=workspace_id, conversation_id=conversation_id, thread_id=thread_id, before=before,
        after=after, forward=forward, limit=limit + 1,
    ).fetchall()  # fmt: skip
    rows = [_history_row(values) for values in fetched[:limit]]
    if not forward:
        rows.reverse()
    return RowPage(rows=rows, has_more=len(fetched) > limit)


@dataclass(frozen=True)
class SearchHit:
    item: TranscriptItem
    score: float
    snippet: str


def _snippet(text: str, terms: list[str], width: int = 160) -> str:
    lowered = text.lower()
    positions = [p for p in (lowered.find(t.lower()) for t in terms if t) if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    piece = text[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(text) else "")


def _terms(query: str) -> list[str]:
    return [t for t in query.split() if t][:16]


def history_search_rows(
    *,
    workspace_id: int,
    conversation_id: str,
    thread_id: str | None,
    query: str,
    roles: list[str] | None,
    event_types: list[str] | None,
    top_k: int,
) -> list[SearchHit]:
    """The best `top_k` (≤ 50) transcript items of one conversation for `query`, best first.

    PostgreSQL: full-text search (`websearch_to_tsquery`, ranked by `ts_rank`) on the GIN index of
    `to_tsvector('simple', content)`; when that finds nothing (e.g. CJK text without spaces) the
    substring fallback runs. Elsewhere (SQLite): the substring fallback only — every term must occur
    (case-insensitive); score = occurrences of the terms; ties go to the newest item.
    """
    top_k = max(1, min(top_k, HISTORY_SEARCH_TOP_K_MAX))
    terms = _terms(query)
    if not terms:
        return []
    queryset = TranscriptItem.objects.filter(workspace_id=workspace_id, conversation_id=conversation_id)
    if thread_id is not None:
        queryset = queryset.filter(thread_id=thread_id)
    if roles:
        queryset = queryset.filter(role__in=roles)
    if event_types:
        queryset = queryset.filter(event__event_type__in=event_types)
    queryset = queryset.select_related("event")
    if connection.vendor == "postgresql":
        search = SearchQuery(query, config=SEARCH_CONFIG, search_type="websearch")
        ranked = (
            queryset.annotate(document=TranscriptVector("content"))
            .filter(document=search)
            .annotate(rank=SearchRank(F("document"), search))
            .order_by("-rank", "-id")[:top_k]
        )
        hits = [SearchHit(item, float(item.rank), _snippet(item.content, terms)) for item in ranked]
        if hits:
            return hits
    for term in terms:
        queryset = queryset.filter(content__icontains=term)
    # The newest matches are scored; an old conversation never makes one search scan all of it twice.
    candidates = list(queryset.order_by("-id")[: top_k * 20])
    scored = [
        SearchHit(item, float(sum(item.content.lower().count(t.lower()) for t in terms)), _snippet(item.content, terms))
        for item in candidates
    ]
    scored.sort(key=lambda hit: (-hit.score, -(hit.item.pk or 0)))
    return scored[:top_k]


class TranscriptVector(Func):
    """`to_tsvector('simple', <column>)` exactly as the GIN index of migration 0002 spells it, so the
    planner can use that index (Django's `SearchVector` wraps the column in COALESCE, which it cannot)."""

    function = "to_tsvector"
    template = f"%(function)s('{SEARCH_CONFIG}'::regconfig, %(expressions)s)"
    output_field = SearchVectorField()


def event_in_conversation(*, workspace_id: int, conversation_id: str, event_id: str) -> EventLog | None:
    """The event `event_id` if it belongs to this conversation, else None (also for other workspaces)."""
    return EventLog.objects.filter(
        workspace_id=workspace_id, conversation_id=conversation_id, event_id=event_id
    ).first()


def event_page_rows(
    *,
    workspace_id: int,
    conversation_id: str,
    before: int | None,
    after: int | None,
    forward: bool,
    limit: int,
    event_types: list[str] | None,
) -> RowPage:
    """A page of one conversation's events (cursor: EventLog id), `limit` ≤ 100."""
    limit = max(1, min(limit, PAGE_LIMIT_MAX))
    queryset = EventLog.objects.filter(workspace_id=workspace_id, conversation_id=conversation_id)
    if event_types:
        queryset = queryset.filter(event_type__in=event_types)
    return _walk(queryset, before=before, after=after, forward=forward, limit=limit)


def actor_took_part(*, workspace_id: int, conversation_id: str, actor: str, bot_id: str) -> bool:
    """Whether `actor` (`actor_type:actor_id`, as a run's scope names it) sent an event to `conversation_id`
    through the same bot (`bot_id`, "" for none): the `history_same_actor` grant. The bot is part of the
    check because actor ids are a platform's own, and the same id on two platforms is two people."""
    actor_type, _, actor_id = actor.partition(":")
    if not actor_id:
        return False
    rows = EventLog.objects.filter(workspace_id=workspace_id, conversation_id=conversation_id, actor__actor_id=actor_id)
    if actor_type != "unknown":
        rows = rows.filter(actor__actor_type=actor_type)
    rows = rows.filter(bot__bot_id=bot_id) if bot_id else rows.filter(bot__isnull=True)
    return rows.exists()
