"""The event envelope the gateway accepts (`POST /api/v1/events`, docs/architecture.md, "The REST API"), as a strict
pydantic model.

It is the host-side, inbound form of the event envelope (docs/architecture.md, "The path of one event"): unknown fields
are refused (a typo must not silently drop data), and the parts the host owns — workspace, delivery,
`raw_ref` — are not accepted from clients. Checks that need the database (the bot belongs to the
caller's workspace, attachments exist) happen in `gateway.services.event_ingest`.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, field_validator, model_validator

# `message.received`, `member.joined`, `schedule.fired`: lowercase words joined by dots.
EVENT_TYPE_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$"
# Event ids appear in URLs (`GET /events/{event_id}`), so they are restricted to URL-safe characters.
EVENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$"

# Events about a message that carry no message of their own (docs/platform-events.md): a recalled message is
# gone, so the event names it (`data.target_message_id`) and has no input.
TEXTLESS_MESSAGE_EVENTS = frozenset({"message.recalled"})

EventId = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=EVENT_ID_PATTERN)]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=255)]


class EventSource(StrEnum):
    PLATFORM = "platform"
    WEBUI = "webui"
    API = "api"
    SCHEDULER = "scheduler"
    SYSTEM = "system"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ActorIn(_Strict):
    """Who caused the event (docs/protocol.md, "The run context"), e.g. the sender of a message."""

    actor_type: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "user"
    actor_id: ShortText | None = None
    actor_name: ShortText | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class SubjectIn(_Strict):
    """What the event is about (docs/protocol.md, "The run context"), e.g. the message, the group, the schedule."""

    subject_type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    subject_id: ShortText | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class ContentIn(BaseModel):
    """One part of a multimodal input. Open like the SDK's `ContentElement`: fields of kinds the host does
    not know are kept for the runner."""

    model_config = ConfigDict(extra="allow")

    type: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class AttachmentIn(_Strict):
    """One input attachment, given exactly one way: `artifact_id` (an artifact already stored in this
    workspace, e.g. from `POST /api/v1/artifacts`), inline `base64` or a `data_url`, a `url` the host
    fetches (public addresses only, unless `LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE`), or a `platform_ref`
    kept as is for the platform adapter. The other `ArtifactRef` fields are accepted so a client may echo
    a ref back, but the stored artifact's values are what the host keeps."""

    artifact_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    base64: str | None = None
    data_url: str | None = None
    url: Annotated[str, StringConstraints(max_length=2048)] | None = None
    platform_ref: dict[str, Any] | None = None
    name: Annotated[str, StringConstraints(max_length=255)] | None = None
    mime_type: Annotated[str, StringConstraints(max_length=255)] | None = None
    size: int | None = None
    sha256: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AttachmentIn:
        given = [f for f in ("artifact_id", "base64", "data_url", "url", "platform_ref") if getattr(self, f)]
        if len(given) != 1:
            raise ValueError("give exactly one of artifact_id, base64, data_url, url or platform_ref")
        return self

    @property
    def is_stored(self) -> bool:
        return self.artifact_id is not None


class InputIn(_Strict):
    """The event's input (docs/protocol.md, "The run context"). Large files travel as artifact refs, never inline."""

    text: str | None = None
    contents: list[ContentIn] = Field(default_factory=list, max_length=100)
    attachments: list[AttachmentIn] = Field(default_factory=list, max_length=100)
    message_chain: dict[str, Any] | None = None

    @property
    def is_empty(self) -> bool:
        return not self.text and not self.contents and not self.attachments


class EventEnvelopeIn(_Strict):
    """The body of `POST /api/v1/events`.

    `data.raw` may carry the platform's raw payload; above `LANGBOT_RAW_INLINE_MAX_BYTES` the gateway
    moves it into an artifact and records `raw_ref` instead.
    """

    event_id: EventId | None = Field(default=None, description="Idempotency key in the workspace; generated if absent.")
    event_type: Annotated[str, StringConstraints(max_length=100, pattern=EVENT_TYPE_PATTERN)] = "message.received"
    source: EventSource = EventSource.API
    source_event_type: Annotated[str, StringConstraints(max_length=100)] | None = Field(
        default=None, description="The platform's own name for the event, e.g. `im.message.receive_v1`."
    )
    bot_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    conversation_id: ShortText | None = Field(
        default=None, description="Used as given; when absent it is derived from the bot and the chat."
    )
    thread_id: ShortText | None = None
    actor: ActorIn | None = None
    subject: SubjectIn | None = None
    input: InputIn = Field(default_factory=InputIn, validate_default=True)
    data: dict[str, Any] = Field(default_factory=dict)
    event_time: datetime | None = Field(
        default=None, description="When the event happened: ISO 8601, or Unix seconds."
    )

    @field_validator("conversation_id", "thread_id")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value)):
            raise ValueError("must be visible text without control characters")
        return value

    @field_validator("event_time", mode="before")
    @classmethod
    def _event_time(cls, value: Any) -> Any:
        # JSON numbers are Unix seconds; pydantic would otherwise guess seconds vs. milliseconds by size.
        if isinstance(value, bool):
            raise ValueError("must be an ISO 8601 date-time or Unix seconds")
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError("must be a finite number of Unix seconds")
            try:
                return datetime.fromtimestamp(value, tz=UTC)
            except (OverflowError, OSError, ValueError):
                raise ValueError("is out of range") from None
        return value

    @field_validator("event_time")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            # A time without an offset is read as UTC rather than the server's zone.
            return value.replace(tzinfo=UTC)
        return value

    @field_validator("input")
    @classmethod
    def _message_has_input(cls, value: InputIn, info: ValidationInfo) -> InputIn:
        # Fields validate in declaration order, so a valid `event_type` is already in `info.data`.
        event_type = info.data.get("event_type", "")
        if isinstance(event_type, str) and event_type.startswith("message.") and value.is_empty:
            if event_type in TEXTLESS_MESSAGE_EVENTS:
                return value
            raise ValueError("a message event needs input.text, input.contents or input.attachments")
        return value

    @property
    def is_message(self) -> bool:
        return self.event_type.startswith("message.") and self.event_type not in TEXTLESS_MESSAGE_EVENTS

    def event_id_or_new(self) -> str:
        return self.event_id or str(uuid.uuid4())
