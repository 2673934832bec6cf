"""Input shapes for bots and bindings (docs/architecture.md, "The REST API"), as strict pydantic models shared by API,
admin and management commands. Unknown keys are errors; error locations become dotted field names
(`scope.scope_type`, `resource_policy.allowed_model_ids`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from bindings.policies import (
    MERGE_WINDOW_DEFAULT,
    MERGE_WINDOW_MAX,
    ConcurrencyPolicy,
    DeliveryPolicy,
    ResourcePolicy,
    StatePolicy,
)
from bindings.triggers import TriggerPolicy
from langbot_sdk.protocol import RunnerId

SLUG_PATTERN = r"^[-a-zA-Z0-9_]+$"
Slug = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=SLUG_PATTERN)]
# `message.received`, `message.*` (a family) or `*` (everything).
EventTypePattern = Annotated[str, StringConstraints(max_length=128, pattern=r"^(\*|[a-z0-9_]+(\.[a-z0-9_]+)*(\.\*)?)$")]

BotPlatform = Literal[
    "webui",
    "api",
    "telegram",
    "discord",
    "slack",
    "lark",
    "dingtalk",
    "wecom",
    "wecom_aibot",
    "wecom_kf",
    "wechat_oa",
    "line",
    "qq",
    "qq_official",
    "mattermost",
    "kook",
    "matrix",
    "satori",
    "other",
]
# The platforms a bot may name (bindings.models.Bot.Platform holds the same values, with labels).
BOT_PLATFORMS: tuple[str, ...] = get_args(BotPlatform)
TIMEOUT_MAX_SECONDS = 3600
PRIORITY_LIMIT = 1_000_000
# A web bot's widget origins as sent: checked and normalized by `bindings.origins` (at most 50 once repeats
# are gone); this only bounds the work a request can ask for.
OriginText = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
ORIGINS_SENT_MAX = 500


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BindingScopeIn(_Input):
    scope_type: Literal["global", "workspace", "bot"]
    scope_id: str | None = Field(default=None, max_length=64)
    """bot_id for bot scope; the workspace slug for workspace scope (defaults to the caller's)."""


class BindingIn(_Input):
    """A whole binding, as created (or as a PATCH leaves it)."""

    binding_id: Slug | None = None
    """Generated from the name (or randomly) when omitted; unique per workspace."""
    name: str = Field(default="", max_length=200)
    scope: BindingScopeIn = Field(default_factory=lambda: BindingScopeIn(scope_type="workspace"))
    event_types: list[EventTypePattern] = Field(min_length=1, max_length=64)
    runner_id: str
    runner_config: dict[str, Any] = Field(default_factory=dict)
    resource_policy: ResourcePolicy = Field(default_factory=ResourcePolicy)
    state_policy: StatePolicy = Field(default_factory=StatePolicy)
    delivery_policy: DeliveryPolicy = Field(default_factory=DeliveryPolicy)
    trigger_policy: TriggerPolicy = Field(default_factory=TriggerPolicy)
    """Which events of its scope and event types the binding answers (chat type, mention, prefixes,
    patterns, ignore rules, access lists); the default answers every one."""
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.QUEUE
    merge_window_seconds: float = Field(default=MERGE_WINDOW_DEFAULT, gt=0, le=MERGE_WINDOW_MAX)
    """Under `merge`: how long the host waits after a message for the next one before the run starts."""
    timeout_seconds: int = Field(default=300, ge=1, le=TIMEOUT_MAX_SECONDS)
    priority: int = Field(default=0, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)
    """Among replying bindings of the same scope level, the highest priority answers."""
    enabled: bool = True

    @field_validator("runner_id")
    @classmethod
    def _runner_id(cls, value: str) -> str:
        return str(RunnerId.parse(value))

    @field_validator("event_types")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


class BindingPatchIn(_Input):
    """Any subset of `BindingIn`'s keys. A given key replaces the stored value as a whole (a policy
    object too); `runner_config` secrets sent back as the mask keep their stored values."""

    binding_id: Slug | None = None
    name: str | None = Field(default=None, max_length=200)
    scope: BindingScopeIn | None = None
    event_types: list[EventTypePattern] | None = None
    runner_id: str | None = None
    runner_config: dict[str, Any] | None = None
    resource_policy: ResourcePolicy | None = None
    state_policy: StatePolicy | None = None
    delivery_policy: DeliveryPolicy | None = None
    trigger_policy: TriggerPolicy | None = None
    concurrency_policy: ConcurrencyPolicy | None = None
    merge_window_seconds: float | None = None
    timeout_seconds: int | None = None
    priority: int | None = None
    enabled: bool | None = None


class BotIn(_Input):
    bot_id: Slug | None = None
    """Generated from the name (or randomly) when omitted; unique per workspace."""
    name: str = Field(default="", max_length=200)
    platform: BotPlatform = "webui"
    credentials: dict[str, Any] = Field(default_factory=dict)
    """Write-only: answers show every value as the mask; sending the mask back keeps the stored value;
    a key left out is removed."""
    allowed_origins: list[OriginText] = Field(default_factory=list, max_length=ORIGINS_SENT_MAX)
    """Web bots only: the websites (`scheme://host[:port]`) whose pages may embed the chat widget."""
    enabled: bool = True


class BotPatchIn(_Input):
    bot_id: Slug | None = None
    name: str | None = Field(default=None, max_length=200)
    platform: BotPlatform | None = None
    credentials: dict[str, Any] | None = None
    allowed_origins: list[OriginText] | None = Field(default=None, max_length=ORIGINS_SENT_MAX)
    enabled: bool | None = None
