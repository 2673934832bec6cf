"""Host facts as the context APIs return them (docs/host-apis.md, "History", and "Events"): the one place where
TranscriptItem and EventLog rows become the SDK's stable `TranscriptItem` and `AgentEventRecord`
projections. Raw platform payloads never leave here inline — only their `raw_ref`.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from langbot_sdk.protocol import (
    ActorContext,
    AgentEventRecord,
    ArtifactRef,
    ContentElement,
    ConversationContext,
    EventInputSummary,
    RawEventRef,
    SubjectContext,
)
from langbot_sdk.protocol import TranscriptItem as TranscriptItemRecord
from transcripts.models import EventLog
from transcripts.selectors import TranscriptRow

logger = logging.getLogger(__name__)


def _model_or_none(model: Any, data: Any) -> Any:
    if not isinstance(data, dict) or not data:
        return None
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def _refs(values: Any) -> list[ArtifactRef]:
    refs: list[ArtifactRef] = []
    for value in values if isinstance(values, list) else []:
        ref = _model_or_none(ArtifactRef, value)
        if ref is not None:
            refs.append(ref)
    return refs


def _contents(values: Any) -> list[ContentElement]:
    parts: list[ContentElement] = []
    for value in values if isinstance(values, list) else []:
        part = _model_or_none(ContentElement, value)
        if part is not None:
            parts.append(part)
    return parts


def transcript_item_record(item: TranscriptRow, *, include_artifacts: bool) -> TranscriptItemRecord:
    """The stable projection of one transcript item; its `cursor` is the item id as a string."""
    cursor = str(item.pk)
    return TranscriptItemRecord(
        item_id=cursor,
        cursor=cursor,
        conversation_id=item.conversation_id,
        thread_id=item.thread_id or None,
        role=item.role,
        content=item.content,
        contents=_contents(item.contents),
        artifacts=_refs(item.artifacts) if include_artifacts else [],
        event_id=item.event_key,
        run_id=str(item.run_id) if item.run_id else None,
        runner_id=item.runner_id or None,
        actor=_model_or_none(ActorContext, item.actor),
        created_at=item.created_at,
    )


def event_record(event: EventLog) -> AgentEventRecord:
    """The stable projection of one event: the input without its large parts, the raw payload by ref."""
    raw = event.raw_ref if isinstance(event.raw_ref, dict) and event.raw_ref else None
    data_input: dict[str, Any] = event.input if isinstance(event.input, dict) else {}
    text = data_input.get("text")
    raw_contents = data_input.get("contents")
    contents: list[Any] = raw_contents if isinstance(raw_contents, list) else []
    return AgentEventRecord(
        event_id=event.event_id,
        event_type=event.event_type,
        source=event.source,
        source_event_type=event.source_event_type or None,
        time=event.event_time or event.created_at,
        cursor=str(event.pk),
        conversation=ConversationContext(
            conversation_id=event.conversation_id or None,
            thread_id=event.thread_id or None,
        ),
        actor=_model_or_none(ActorContext, event.actor),
        subject=_model_or_none(SubjectContext, event.subject),
        input=EventInputSummary(
            text=text if isinstance(text, str) else None,
            content_types=[str(c.get("type")) for c in contents if isinstance(c, dict) and c.get("type")],
            attachments=_refs(data_input.get("attachments")),
        ),
        raw_ref=(
            RawEventRef(
                source=event.source,
                artifact_id=str(raw.get("artifact_id") or "") or None,
                mime_type=raw.get("mime_type"),
                size=raw.get("size") if isinstance(raw.get("size"), int) else None,
            )
            if raw
            else None
        ),
    )
