"""`history_page` and `history_search` (docs/host-apis.md, "History"): the
transcript projection of the run's own conversation, never raw platform payloads.

Cursors are transcript item ids as opaque strings. `backward` (default) walks to older items from
`before_cursor` (or from the newest item); `forward` walks to newer ones from `after_cursor` (or from
the oldest). Both cursors together bound the page on both sides. Items are always returned oldest
first; `next_cursor` continues in the walked direction and is None when nothing more exists there
right now; `prev_cursor` is where to walk the other way. A walker that wants items appended later
resumes forward from the cursor of the last item it saw.

`ctx.context.latest_cursor` is the cursor of the newest item *before* the current input, so the
current input (and whatever was appended since) is `after_cursor=latest_cursor`; the current input's
own cursor is `str(ctx.context.transcript_seq)`, and `before_cursor=str(transcript_seq)` reads all of
the history before it, `latest_cursor`'s item first among the newest.

A run reads its own conversation. Another one of its workspace — named by `conversation_id` (page) or
`filters.conversation_id` (search) — only under the binding's grant frozen in the run session
(`HistoryGrant`: listed ids or `*`, or conversations its actor took part in through the same bot); any
other answers `not_found`, as an object outside the run's scope, and never reaches another workspace's
rows (every read filters on the run's workspace). `top_k` is clamped to 50.
"""

from __future__ import annotations

from typing import Any

from bindings.policies import WILDCARD
from hostapi.base import (
    FamilyHandler,
    HandlerResult,
    ProxyCall,
    cursor_value,
    not_found,
    own_conversation,
    own_thread,
    page_cursors,
    require,
)
from langbot_sdk.protocol import Action, HistoryPage, HistorySearchHit, HistorySearchResult
from runners.access.session import RunSession
from transcripts.records import transcript_item_record
from transcripts.selectors import TranscriptRow, actor_took_part, history_page_rows, history_search_rows


async def _readable(call: ProxyCall, requested: str | None, requested_thread: str | None) -> tuple[str, str | None]:
    """The conversation and thread filter a history read may use: the run's own (its thread rules apply),
    or another one the binding's grant opens (then any thread of it may be named)."""
    session = call.session
    own = session.scope.conversation_id
    if requested is None or requested == own or not session.history_grant:
        return own_conversation(session, requested), own_thread(session, requested_thread)
    if await call.db(_granted, session=session, conversation_id=requested):
        return requested, requested_thread
    raise not_found(f"no conversation {requested!r} in this run's scope")


def _granted(*, session: RunSession, conversation_id: str) -> bool:
    grant, scope = session.history_grant, session.scope
    if WILDCARD in grant.conversations or conversation_id in grant.conversations:
        return True
    return grant.same_actor and actor_took_part(
        workspace_id=scope.workspace_id, conversation_id=conversation_id, actor=scope.actor_id, bot_id=scope.bot_id
    )


def _page(
    *,
    workspace_id: int,
    conversation_id: str,
    thread_id: str | None,
    before: int | None,
    after: int | None,
    forward: bool,
    limit: int,
    include_artifacts: bool,
) -> dict[str, Any]:
    page = history_page_rows(
        workspace_id=workspace_id,
        conversation_id=conversation_id,
        thread_id=thread_id,
        before=before,
        after=after,
        forward=forward,
        limit=limit,
    )
    items = [transcript_item_record(row, include_artifacts=include_artifacts) for row in page.rows]
    next_cursor, prev_cursor = page_cursors([i.cursor for i in items], has_more=page.has_more, forward=forward)
    result = HistoryPage(items=items, next_cursor=next_cursor, prev_cursor=prev_cursor, has_more=page.has_more)
    return result.model_dump(mode="json")


async def history_page(call: ProxyCall) -> HandlerResult:
    session, request = call.session, call.request
    require(session.available_apis.history_page, "history.page")
    conversation_id, thread_id = await _readable(call, request.conversation_id, request.thread_id)
    before = cursor_value(request.before_cursor, name="before_cursor")
    after = cursor_value(request.after_cursor, name="after_cursor")
    return await call.db(
        _page,
        workspace_id=session.scope.workspace_id,
        conversation_id=conversation_id,
        thread_id=thread_id,
        before=before,
        after=after,
        forward=request.direction == "forward",
        limit=request.limit,
        include_artifacts=request.include_artifacts,
    )


def _search(
    *,
    workspace_id: int,
    conversation_id: str,
    thread_id: str | None,
    query: str,
    roles: list[str] | None,
    event_types: list[str] | None,
    top_k: int,
) -> dict[str, Any]:
    hits = history_search_rows(
        workspace_id=workspace_id,
        conversation_id=conversation_id,
        thread_id=thread_id,
        query=query,
        roles=roles,
        event_types=event_types,
        top_k=top_k,
    )
    items = [
        HistorySearchHit(
            item=transcript_item_record(TranscriptRow.of(hit.item), include_artifacts=True),
            score=hit.score,
            snippet=hit.snippet,
        )
        for hit in hits
    ]
    return HistorySearchResult(items=items, query=query).model_dump(mode="json")


async def history_search(call: ProxyCall) -> HandlerResult:
    session, request = call.session, call.request
    require(session.available_apis.history_search, "history.search")
    filters = request.filters
    conversation_id, thread_id = await _readable(
        call, filters.conversation_id if filters else None, filters.thread_id if filters else None
    )
    return await call.db(
        _search,
        workspace_id=session.scope.workspace_id,
        conversation_id=conversation_id,
        thread_id=thread_id,
        query=request.query,
        roles=filters.roles if filters else None,
        event_types=filters.event_types if filters else None,
        top_k=request.top_k,
    )


HANDLERS: dict[Action, FamilyHandler] = {
    Action.HISTORY_PAGE: history_page,
    Action.HISTORY_SEARCH: history_search,
}
