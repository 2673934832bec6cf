"""Input shapes of schedules (`/api/v1/schedules`, docs/architecture.md, "The REST API"), strict pydantic models shared
by the REST API and the admin form. Unknown keys are errors; `cron` and `timezone` are checked here, the rules across
fields and the bot and binding (they need the workspace) by `platforms.schedules.services`."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from bindings.specs import Slug
from gateway.envelope import EVENT_TYPE_PATTERN
from platforms.schedules.cron import CronError, cron_parse, timezone_parse

# The gateway's own rules, so a schedule that could never post is refused when it is written.
EventType = Annotated[str, StringConstraints(max_length=100, pattern=EVENT_TYPE_PATTERN)]
# Visible text without control characters.
ConversationId = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]*\S[^\x00-\x1f\x7f]*$")
]
INPUT_TEXT_MAX = 32_768


def cron_checked(value: str) -> str:
    try:
        return cron_parse(value).expression
    except CronError as exc:
        raise ValueError(str(exc)) from None


def timezone_checked(value: str) -> str:
    timezone_parse(value)
    return value


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScheduleIn(_Input):
    """A whole schedule, as created (or as a PATCH leaves it)."""

    schedule_id: Slug | None = None
    """Generated from the name when omitted; unique per workspace; cannot change."""
    name: str = Field(default="", max_length=200)
    cron: str = Field(
        max_length=200,
        description="Five fields, minute hour day-of-month month day-of-week (Celery's crontab: day-of-week 0 is "
        "Sunday, names such as mon-fri allowed, day-of-month and day-of-week must both match).",
    )
    timezone: str = Field(default="UTC", max_length=64, description="IANA time zone the cron fields are read in.")
    enabled: bool = True
    bot_id: Slug | None = Field(default=None, description="Post as an event of this bot of the workspace.")
    binding_id: Slug | None = Field(
        default=None, description="Run this binding (the workspace's or a global one) instead of routing the event."
    )
    event_type: EventType = "message.received"
    input_text: str = Field(default="", max_length=INPUT_TEXT_MAX, description="The event's `input.text`.")
    chat_id: ConversationId | None = Field(
        default=None, description="The bot's chat the reply goes to on its platform (the event's `data.chat_id`)."
    )
    conversation_id: ConversationId | None = Field(
        default=None,
        description="The conversation the events belong to; default: the chat's (`bot:<bot_id>:<chat_id>`) with "
        "a bot and a chat, else `schedule:<schedule_id>`.",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return cron_checked(value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return timezone_checked(value)


class SchedulePatchIn(_Input):
    """Any subset of `ScheduleIn`'s keys; `bot_id`, `binding_id`, `chat_id` and `conversation_id` may be set to
    null."""

    schedule_id: Slug | None = None
    name: str | None = Field(default=None, max_length=200)
    cron: str | None = Field(default=None, max_length=200)
    timezone: str | None = Field(default=None, max_length=64)
    enabled: bool | None = None
    bot_id: Slug | None = None
    binding_id: Slug | None = None
    event_type: EventType | None = None
    input_text: str | None = Field(default=None, max_length=INPUT_TEXT_MAX)
    chat_id: ConversationId | None = None
    conversation_id: ConversationId | None = None
