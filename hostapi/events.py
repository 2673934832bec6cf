"""`event_get` and `event_page` (docs/host-apis.md, "Events"): the stable `AgentEventRecord` projection of the
run's conversation's events. Raw platform payloads only ever appear as `raw_ref`. Cursors are
EventLog ids; a page walks backward (older) unless only `after_cursor` is given, oldest first either
way, limit clamped to 100. An event of another conversation or workspace answers `not_found`.
"""

from __future__ import annotations

from typing import Any

from hostapi.base import (
    FamilyHandler,
    HandlerResult,
    ProxyCall,
    cursor_value,
    not_found,
    own_conversation,
    page_cursors,
    require,
)
from langbot_sdk.protocol import Action, EventPage
from transcripts.records import event_record
from transcripts.selectors import event_in_conversation, event_page_rows


def _get(*, workspace_id: int, conversation_id: str, event_id: str) -> dict[str, Any] | None:
    event = event_in_conversation(workspace_id=workspace_id, conversation_id=conversation_id, event_id=event_id)
    return event_record(event).model_dump(mode="json") if event is not None else None


async def event_get(call: ProxyCall) -> HandlerResult:
    session, request = call.session, call.request
    require(session.available_apis.event_get, "events.get")
    conversation_id = own_conversation(session, None)
    found = await call.db(
        _get, workspace_id=session.scope.workspace_id, conversation_id=conversation_id, event_id=request.event_id
    )
    if found is None:
        raise not_found(f"no event {request.event_id!r} in this run's scope", event_id=request.event_id)
    return found


def _page(
    *,
    workspace_id: int,
    conversation_id: str,
    before: int | None,
    after: int | None,
    forward: bool,
    limit: int,
    event_types: list[str] | None,
) -> dict[str, Any]:
    page = event_page_rows(
        workspace_id=workspace_id,
        conversation_id=conversation_id,
        before=before,
        after=after,
        forward=forward,
        limit=limit,
        event_types=event_types,
    )
    items = [event_record(row) for row in page.rows]
    next_cursor, prev_cursor = page_cursors([i.cursor for i in items], has_more=page.has_more, forward=forward)
    return EventPage(items=items, next_cursor=next_cursor, prev_cursor=prev_cursor, has_more=page.has_more).model_dump(
        mode="json"
    )


async def event_page(call: ProxyCall) -> HandlerResult:
    session, request = call.session, call.request
    require(session.available_apis.event_page, "events.page")
    conversation_id = own_conversation(session, request.conversation_id)
    before = cursor_value(request.before_cursor, name="before_cursor")
    after = cursor_value(request.after_cursor, name="after_cursor")
    return await call.db(
        _page,
        workspace_id=session.scope.workspace_id,
        conversation_id=conversation_id,
        before=before,
        after=after,
        forward=after is not None and before is None,
        limit=request.limit,
        event_types=request.event_types,
    )


HANDLERS: dict[Action, FamilyHandler] = {
    Action.EVENT_GET: event_get,
    Action.EVENT_PAGE: event_page,
}
