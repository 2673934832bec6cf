"""Read models of host facts returned by the context APIs (docs/host-apis.md, "History", and "Events"): transcript
items, history pages and search hits, event records, artifact metadata and artifact reads.

They travel host → runner (``HostModel``). They are projections: stable fields only, artifact refs
instead of content, raw platform payloads only behind a ``raw_ref``. Timestamps are timezone-aware
datetimes (ISO 8601 on the wire).
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from pydantic import Field

from langbot_sdk.protocol.base import HostModel
from langbot_sdk.protocol.context import (
    ActorContext,
    ArtifactRef,
    ContentElement,
    ConversationContext,
    RawEventRef,
    SubjectContext,
)


class TranscriptItem(HostModel):
    """One message-like fact of a conversation (a user message, an assistant reply, a tool note)."""

    item_id: str
    cursor: str
    """Opaque position for ``before_cursor``/``after_cursor`` paging."""
    conversation_id: str
    thread_id: str | None = None
    role: str
    """``user``, ``assistant``, ``system`` or ``tool``."""
    content: str | None = None
    """Plain text of the item."""
    contents: list[ContentElement] = Field(default_factory=list)
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    event_id: str | None = None
    run_id: str | None = None
    runner_id: str | None = None
    actor: ActorContext | None = None
    created_at: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)


class HistoryPage(HostModel):
    """A page of transcript items in chronological order (oldest first)."""

    items: list[TranscriptItem] = Field(default_factory=list)
    next_cursor: str | None = None
    """Continue in the requested direction from here (``None`` when there is nothing more)."""
    prev_cursor: str | None = None
    has_more: bool = False


class HistorySearchHit(HostModel):
    item: TranscriptItem
    score: float | None = None
    snippet: str | None = None


class HistorySearchResult(HostModel):
    """Search hits, best first."""

    items: list[HistorySearchHit] = Field(default_factory=list)
    query: str | None = None


class EventInputSummary(HostModel):
    """The input of an event without large content: text and the kinds/refs of the rest."""

    text: str | None = None
    content_types: list[str] = Field(default_factory=list)
    attachments: list[ArtifactRef] = Field(default_factory=list)


class AgentEventRecord(HostModel):
    """A stable projection of one host event (EventLog row)."""

    event_id: str
    event_type: str
    source: str
    source_event_type: str | None = None
    time: datetime
    cursor: str | None = None
    conversation: ConversationContext | None = None
    actor: ActorContext | None = None
    subject: SubjectContext | None = None
    input: EventInputSummary = Field(default_factory=EventInputSummary)
    raw_ref: RawEventRef | None = None


class EventPage(HostModel):
    items: list[AgentEventRecord] = Field(default_factory=list)
    next_cursor: str | None = None
    prev_cursor: str | None = None
    has_more: bool = False


class ArtifactMetadata(HostModel):
    artifact_id: str
    name: str
    mime_type: str
    size: int
    sha256: str | None = None
    created_at: datetime
    expires_at: datetime | None = None
    conversation_id: str | None = None
    run_id: str | None = None
    source: str | None = None
    """Who produced it: ``upload``, ``platform``, ``runner``, ``tool``, ..."""
    metadata: dict[str, Any] = Field(default_factory=dict)


class ArtifactReadResult(HostModel):
    """One byte range of an artifact."""

    artifact_id: str
    offset: int
    length: int
    """Bytes actually returned (may be fewer than requested at the end)."""
    data_base64: str
    eof: bool
    total_size: int | None = None

    def data(self) -> bytes:
        return base64.b64decode(self.data_base64)


class ArtifactUploadOpened(HostModel):
    """The answer to ``artifact_upload_open``: the upload's id and the caps it is held to."""

    upload_id: str
    max_bytes: int
    """The most this upload may hold (the workspace's setting)."""
    chunk_max_bytes: int


class ArtifactUploadProgress(HostModel):
    """The answer to ``artifact_upload_chunk`` and ``artifact_upload_abort``."""

    upload_id: str
    received: int
    """Bytes held so far: the offset of the next chunk."""
    aborted: bool = False


class ArtifactStreamChunk(HostModel):
    """One chunk of ``artifact_stream`` (sent as ``continue`` frames; the last has ``eof``)."""

    artifact_id: str
    offset: int
    data_base64: str
    eof: bool = False

    def data(self) -> bytes:
        return base64.b64decode(self.data_base64)
