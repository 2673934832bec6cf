"""Resources authorized for one run (docs/protocol.md, "The run context"), sent host → runner inside the run context.

Each list is the result of manifest permissions ∩ binding resource policy ∩ runner config selections,
frozen when the run starts. Ids are opaque to runners; ``operations`` says which proxy methods the run
may call on a resource. The host re-checks all of it on every proxy call — this is information for the
runner, not the enforcement.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from langbot_sdk.protocol.base import HostModel
from langbot_sdk.protocol.limits import (
    ARTIFACT_READ_MAX_BYTES,
    HISTORY_PAGE_MAX,
    HISTORY_SEARCH_TOP_K_MAX,
)
from langbot_sdk.protocol.state import StateScope, StorageArea

ModelOperation = Literal["invoke", "stream", "rerank"]
ToolOperation = Literal["detail", "call"]
KnowledgeBaseOperation = Literal["list", "retrieve"]
ArtifactOperation = Literal["metadata", "read"]


class ModelResource(HostModel):
    """A model the run may call through ``api.models``."""

    model_id: str
    name: str | None = None
    kind: str = "llm"
    """``llm``, ``embedding`` or ``rerank`` (open for future kinds)."""
    provider: str | None = None
    operations: list[ModelOperation] = Field(default_factory=list)
    supports_tools: bool = False
    supports_vision: bool = False
    context_window: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolResource(HostModel):
    """A tool the run may inspect or call through ``api.tools``."""

    tool_name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    """JSON Schema of the tool's parameters."""
    source: str | None = None
    """Where the tool comes from, e.g. ``mcp:<server>`` or ``plugin:<author>/<name>``."""
    operations: list[ToolOperation] = Field(default_factory=list)


class KnowledgeBaseResource(HostModel):
    """A knowledge base the run may query through ``api.knowledge``."""

    kb_id: str
    name: str | None = None
    description: str | None = None
    operations: list[KnowledgeBaseOperation] = Field(default_factory=list)


class ArtifactResource(HostModel):
    """An artifact made readable to this run beyond the ones of its own conversation (e.g. a shared file)."""

    artifact_id: str
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    operations: list[ArtifactOperation] = Field(default_factory=list)


class StorageResource(HostModel):
    """Storage areas the run may use through ``api.storage``."""

    areas: list[StorageArea] = Field(default_factory=list)


class StateResource(HostModel):
    """State scopes the run may use through ``api.state`` (the binding's state policy)."""

    enabled: bool = False
    scopes: list[StateScope] = Field(default_factory=list)


class HistoryResource(HostModel):
    """History and event access of this run; by default only the current conversation/thread."""

    page: bool = False
    search: bool = False
    event_get: bool = False
    event_page: bool = False
    cross_conversation: bool = False
    max_page_size: int = HISTORY_PAGE_MAX
    max_search_top_k: int = HISTORY_SEARCH_TOP_K_MAX
    max_artifact_read_bytes: int = ARTIFACT_READ_MAX_BYTES


class AgentResources(HostModel):
    models: list[ModelResource] = Field(default_factory=list)
    tools: list[ToolResource] = Field(default_factory=list)
    knowledge_bases: list[KnowledgeBaseResource] = Field(default_factory=list)
    artifacts: list[ArtifactResource] = Field(default_factory=list)
    storage: StorageResource = Field(default_factory=StorageResource)
    state: StateResource = Field(default_factory=StateResource)
    history: HistoryResource = Field(default_factory=HistoryResource)
    platform_capabilities: dict[str, Any] = Field(default_factory=dict)

    def find_model(self, model_id: str) -> ModelResource | None:
        return next((m for m in self.models if m.model_id == model_id), None)

    def find_tool(self, tool_name: str) -> ToolResource | None:
        return next((t for t in self.tools if t.tool_name == tool_name), None)

    def find_knowledge_base(self, kb_id: str) -> KnowledgeBaseResource | None:
        return next((kb for kb in self.knowledge_bases if kb.kb_id == kb_id), None)
