"""The run request and the event-first run context the host sends to a runner (docs/protocol.md, "The run context").

Everything here travels host → runner and is read leniently (``HostModel``). The context carries the
current event, its input, delivery capabilities, the authorized resources and *handles* to more context
(cursors, available APIs) — never the full history: runners pull what they need through the proxy.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import ConfigDict, Field

from langbot_sdk.protocol.base import HostModel
from langbot_sdk.protocol.resources import AgentResources

TriggerSource = Literal["platform", "webui", "api", "scheduler", "system", "pipeline_adapter"]
InlineMode = Literal["none", "current_event", "recent_tail", "summary_tail"]


class ContentElement(HostModel):
    """One part of a multimodal message or input.

    Open by design: ``type`` names the kind (``text``, ``image_url``, ``image_base64``, ``file``,
    ``artifact``, ...) and the fields for that kind are set; unknown kinds keep all their fields so a
    runner can pass through what it does not understand.
    """

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    image_url: str | None = None
    image_base64: str | None = None
    file_url: str | None = None
    file_name: str | None = None
    mime_type: str | None = None
    artifact_id: str | None = None

    @classmethod
    def of_text(cls, text: str) -> ContentElement:
        return cls(type="text", text=text)


class ArtifactRef(HostModel):
    """A pointer to an artifact; content is read through ``api.artifacts``, never inlined."""

    artifact_id: str
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    sha256: str | None = None


class ToolCallFunction(HostModel):
    name: str = ""
    """Empty only in a streamed fragment after the call's first."""
    arguments: str = ""
    """JSON-encoded arguments, as model providers return them (a piece of them in a streamed fragment)."""


class ToolCall(HostModel):
    id: str = ""
    """Empty only in a streamed fragment after the call's first."""
    type: str = "function"
    function: ToolCallFunction = Field(default_factory=ToolCallFunction)
    index: int | None = None
    """Set in ``LLMStreamChunk`` deltas: fragments with the same index belong to one call, to be joined in
    order (id and name come with the first, ``arguments`` is split across them)."""


class Message(HostModel):
    """A chat message (OpenAI-style roles) as used in bootstrap messages and model calls."""

    role: str
    content: str | list[ContentElement] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The plain text of the message (text parts joined by newlines)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if part.type == "text" and part.text)


class AgentTrigger(HostModel):
    type: str
    source: TriggerSource
    timestamp: int | None = None
    """Epoch seconds at which the trigger fired."""


class RawEventRef(HostModel):
    """Where the original platform payload can be fetched (large payloads are never inlined)."""

    source: str | None = None
    ref: str | None = None
    artifact_id: str | None = None
    mime_type: str | None = None
    size: int | None = None


class AgentEventContext(HostModel):
    event_id: str
    event_type: str
    event_time: int | None = None
    """Epoch seconds of the event at its source."""
    source: str
    source_event_type: str | None = None
    raw_ref: RawEventRef | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class ConversationContext(HostModel):
    conversation_id: str | None = None
    thread_id: str | None = None
    launcher_type: str | None = None
    launcher_id: str | None = None
    bot_id: str | None = None
    workspace_id: str | None = None


PERSON_ID_KEY = "person_id"
"""`actor.metadata.person_id`: the host's person the platform actor is linked to (one person across channels);
`actor.metadata.person_name` is their display name. Absent when the event has no actor."""
PERSON_NAME_KEY = "person_name"


class ActorContext(HostModel):
    actor_type: str
    actor_id: str | None = None
    actor_name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class SubjectContext(HostModel):
    subject_type: str
    subject_id: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class AgentInput(HostModel):
    """The current event's main input (not history)."""

    text: str | None = None
    contents: list[ContentElement] = Field(default_factory=list)
    attachments: list[ArtifactRef] = Field(default_factory=list)
    message_chain: dict[str, Any] | None = None


class DeliveryContext(HostModel):
    surface: str
    reply_target: dict[str, Any] | None = None
    supports_streaming: bool = False
    supports_edit: bool = False
    supports_reaction: bool = False
    max_message_size: int | None = None
    platform_capabilities: dict[str, Any] = Field(default_factory=dict)


class InlineContextPolicy(HostModel):
    """What the host inlined into this context, and why."""

    mode: InlineMode = "current_event"
    delivered_count: int = 0
    source_total_count: int | None = None
    messages_complete: bool = False
    reason: str | None = None


class ContextAPICapabilities(HostModel):
    """Which context APIs this run may call."""

    history_page: bool = False
    history_search: bool = False
    event_get: bool = False
    event_page: bool = False
    artifact_metadata: bool = False
    artifact_read: bool = False
    # Uploads (`api.artifacts.upload`): open when the workspace's upload limit is above 0.
    artifact_upload: bool = False
    state: bool = False
    storage: bool = False


class ContextAccess(HostModel):
    """Handles for pulling more context: where the current event sits and which APIs are open."""

    conversation_id: str | None = None
    thread_id: str | None = None
    latest_cursor: str | None = None
    event_seq: int | None = None
    transcript_seq: int | None = None
    has_history_before: bool = False
    inline_policy: InlineContextPolicy = Field(default_factory=InlineContextPolicy)
    available_apis: ContextAPICapabilities = Field(default_factory=ContextAPICapabilities)


class BootstrapContext(HostModel):
    """Optional host convenience for simple runners; never the full transcript."""

    messages: list[Message] = Field(default_factory=list)
    summary: str | None = None
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class StaticContextRef(HostModel):
    """A KV-cache friendly reference to static content (system policy, tool schema, ...)."""

    ref: str
    version: str | None = None
    hash: str | None = None
    size: int | None = None


class AgentRuntimeContext(HostModel):
    host: str = "langbot"
    langbot_version: str | None = None
    trace_id: str
    deadline_at: float | None = None
    """Epoch seconds (float) after which the run is cancelled; proxy calls are bounded by it."""
    locale: str | None = None
    timezone: str | None = None
    static_refs: dict[str, StaticContextRef] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def remaining_seconds(self, now: float | None = None) -> float | None:
        """Seconds left before the deadline (never negative), or ``None`` without a deadline."""
        if self.deadline_at is None:
            return None
        return max(0.0, self.deadline_at - (time.time() if now is None else now))


class AgentRunState(HostModel):
    """Optional host-owned state snapshot, one map per scope."""

    conversation: dict[str, Any] = Field(default_factory=dict)
    actor: dict[str, Any] = Field(default_factory=dict)
    subject: dict[str, Any] = Field(default_factory=dict)
    runner: dict[str, Any] = Field(default_factory=dict)
    binding: dict[str, Any] = Field(default_factory=dict)


class AdapterContext(HostModel):
    """Entry-adapter-only fields (e.g. the Pipeline adapter); runners must not depend on them long-term."""

    adapter_type: str = "pipeline"
    data: dict[str, Any] = Field(default_factory=dict)


class AgentRunContext(HostModel):
    run_id: str
    trigger: AgentTrigger
    event: AgentEventContext
    conversation: ConversationContext | None = None
    actor: ActorContext | None = None
    subject: SubjectContext | None = None
    input: AgentInput = Field(default_factory=AgentInput)
    delivery: DeliveryContext
    resources: AgentResources = Field(default_factory=AgentResources)
    context: ContextAccess = Field(default_factory=ContextAccess)
    state: AgentRunState = Field(default_factory=AgentRunState)
    runtime: AgentRuntimeContext
    config: dict[str, Any] = Field(default_factory=dict)
    bootstrap: BootstrapContext | None = None
    adapter: AdapterContext | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentRunRequest(HostModel):
    """Payload of ``run_agent``.

    ``run_token`` is the run's proxy credential: unguessable, issued by the host for this run only and
    valid while the run is active. The runtime keeps it out of ``context`` (so runner code never handles
    it) and stamps it on every proxy call the run's task makes.
    """

    runner_id: str
    runner_name: str
    context: AgentRunContext
    run_token: str | None = None
