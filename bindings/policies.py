"""The policies an AgentBinding carries, as strict pydantic models (unknown keys are errors).

They are stored as JSON on the binding and read back with `*.model_validate(binding.<policy>)`.
Lists of ids follow one rule everywhere: an empty list allows nothing, `"*"` allows every one of the
workspace. Resources are the manifest's permissions ∩ these policies, narrowed by the runner config's
selections where it selects something of that kind (an empty selector narrows nothing:
docs/context-and-results.md, "The resource snapshot"); these models are only the middle term.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer

from langbot_sdk.protocol.state import StateScope, StorageArea

WILDCARD = "*"

ResourceName = Annotated[str, StringConstraints(min_length=1, max_length=255, strip_whitespace=True)]


class _Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _allows(allowed: list[str], name: str) -> bool:
    return WILDCARD in allowed or name in allowed


class ResourcePolicy(_Policy):
    """Which host resources runs of the binding may reach."""

    allowed_model_ids: list[ResourceName] = Field(default_factory=list)
    allowed_tool_names: list[ResourceName] = Field(default_factory=list)
    allowed_kb_ids: list[ResourceName] = Field(default_factory=list)
    storage_areas: list[StorageArea] = Field(default_factory=lambda: [StorageArea.PLUGIN, StorageArea.BINDING])
    """`plugin` and `binding` areas are private to the runner; `workspace` is shared and must be granted."""
    platform_actions: list[ResourceName] = Field(default_factory=list)
    require_action_approval: bool = True
    """Platform actions a runner requests wait for an operator's approval unless this is false."""
    history_conversations: list[ResourceName] = Field(default_factory=list)
    """Other conversations of the workspace whose history (page and search) runs may read, by id; `*` any
    of them. A run always reads its own; the manifest must still ask for `history`."""
    history_same_actor: bool = False
    """Runs may also read the history of any conversation of the workspace the run's actor took part in."""

    def allows_model(self, model_id: str) -> bool:
        return _allows(self.allowed_model_ids, model_id)

    def allows_tool(self, tool_name: str) -> bool:
        return _allows(self.allowed_tool_names, tool_name)

    def allows_kb(self, kb_id: str) -> bool:
        return _allows(self.allowed_kb_ids, kb_id)

    def allows_platform_action(self, action: str) -> bool:
        return _allows(self.platform_actions, action)

    @property
    def grants_cross_conversation(self) -> bool:
        return bool(self.history_conversations) or self.history_same_actor


class StatePolicy(_Policy):
    """Whether runs may keep host-owned state, and in which scopes. Keys stay isolated per runner+binding."""

    enable_state: bool = True
    state_scopes: list[StateScope] = Field(default_factory=lambda: list(StateScope))


class RetryPolicy(_Policy):
    """An automatic new attempt for a run that failed with a retryable host-side fault (the runtime died,
    the worker was lost or shut down): at most `max_attempts` runs per event in all, the next one started
    `backoff_seconds` after the failure, doubling each time. A runner's own failure is never retried."""

    max_attempts: int = Field(default=1, ge=1, le=5)
    backoff_seconds: float = Field(default=2.0, ge=0, le=300)


class GroupReply(StrEnum):
    """How a reply in a group chat points at the message it answers (private chats are never affected)."""

    PLAIN = "plain"
    """A message of its own in the chat (in the thread the message was in, if any)."""
    QUOTE = "quote"
    """A reply to the message: Telegram's reply, a Slack thread, a Discord reference, Lark's reply API,
    OneBot's reply segment. What the adapters did before this setting existed."""
    MENTION = "mention"
    """A message of its own that @-mentions the sender first; quoted instead where the platform has no way
    to mention them (a Telegram user without a username)."""


class NonTextInput(StrEnum):
    NOTE = "note"
    REFUSE = "refuse"


class DeliveryPolicy(_Policy):
    """How results reach the user. `enable_reply: false` makes the binding an observer (docs/architecture.md, "Runs").
    `retry` (opt-in, absent by default) retries runs lost to a host-side fault, so the user still gets an
    answer."""

    enable_streaming: bool = True
    enable_reply: bool = True
    max_message_size: int | None = Field(default=None, ge=1, le=1024 * 1024)
    """Longest reply text (characters) delivered to the platform; None leaves it to the platform adapter."""
    retry: RetryPolicy | None = None
    non_text_input: NonTextInput = NonTextInput.NOTE
    """What a message with images, files or other non-text parts does when the runner declares
    `multimodal_input: false`: `note` (each part reaches it as a text note naming it) or `refuse` (the
    event is refused with `input.unsupported`, no run starts)."""
    group_reply: GroupReply = GroupReply.QUOTE
    """How a reply in a group chat points at the message it answers (`GroupReply`)."""

    @model_serializer(mode="wrap")
    def _without_unset_retry(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A binding that did not opt in reads back exactly as it was written.
        data: dict[str, Any] = handler(self)
        if self.retry is None:
            data.pop("retry", None)
        return data


RATE_LIMIT_MESSAGES_MAX = 10_000
RATE_LIMIT_SECONDS_MAX = 86_400


class RateLimit(_Policy):
    """At most `messages` events answered per `seconds` (a fixed window that starts with its first event)."""

    messages: int = Field(ge=1, le=RATE_LIMIT_MESSAGES_MAX)
    seconds: int = Field(ge=1, le=RATE_LIMIT_SECONDS_MAX)


class ConcurrencyPolicy(StrEnum):
    """What a message does when a run of the same conversation and binding is still active (`merge` also
    when one is merely about to start). `runners.lifecycle.services.run_create` carries them out."""

    QUEUE = "queue"
    INTERRUPT = "interrupt"
    REJECT = "reject"
    PARALLEL = "parallel"
    MERGE = "merge"
    """Debounce: messages that arrive within `merge_window_seconds` of each other become one run's input."""
    STEER = "steer"
    """A message is handed to the running run as more input when its runner declares `steering`; else `queue`."""


MERGE_WINDOW_DEFAULT = 1.5
MERGE_WINDOW_MAX = 60.0
"""The longest quiet window a binding may set (seconds)."""
MERGE_SPAN_FACTOR = 4
"""A merged run starts at the latest this many windows after its first message, however the user keeps typing."""
MERGE_MAX_MESSAGES = 20
"""The most messages one merged run takes; the next one starts a run of its own."""
