"""Reads of host facts for the REST API and admin: events and conversation transcripts.

Transcript pages use the item id as the cursor (`before`), newest first, on the
(workspace, conversation_id, id) index — never OFFSET, so a page costs the same at any depth.
"""

from __future__ import annotations

from dataclasses import dataclass

from bindings.models import Workspace
from transcripts.models import EventLog, TranscriptItem

PAGE_LIMIT_MAX = 100


@dataclass(frozen=True)
class TranscriptPage:
    items: list[TranscriptItem]
    # Pass as `before` for the next (older) page; None when this page reaches the beginning.
    next_before: int | None


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
