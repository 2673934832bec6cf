"""Proxy payloads for host capabilities a runner *calls* (docs/host-apis.md, docs/platform-actions.md): models, tools,
knowledge bases and platform actions — requests (runner → host, strict) and results (host → runner).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from langbot_sdk.protocol.base import HostModel, ProxyRequest
from langbot_sdk.protocol.context import Message
from langbot_sdk.protocol.limits import KNOWLEDGE_TOP_K_DEFAULT, KNOWLEDGE_TOP_K_MAX


class InvokeLLMRequest(ProxyRequest):
    model_id: str = Field(min_length=1)
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    """Tool definitions in the OpenAI function format (usually from ``ToolResource``)."""
    extra_args: dict[str, Any] | None = None
    """Provider arguments such as ``temperature``; the host may drop ones it does not allow."""


class InvokeLLMStreamRequest(InvokeLLMRequest):
    pass


class InvokeRerankRequest(ProxyRequest):
    model_id: str = Field(min_length=1)
    query: str
    documents: list[str]
    top_k: int | None = Field(default=None, ge=1)


class CountTokensRequest(ProxyRequest):
    model_id: str = Field(min_length=1)
    messages: list[Message] = Field(default_factory=list)
    text: str | None = None


class GetToolDetailRequest(ProxyRequest):
    tool_name: str = Field(min_length=1)


class CallToolRequest(ProxyRequest):
    tool_name: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)


class RetrieveKnowledgeBaseRequest(ProxyRequest):
    kb_id: str = Field(min_length=1)
    query_text: str
    top_k: int = Field(default=KNOWLEDGE_TOP_K_DEFAULT, ge=1, le=KNOWLEDGE_TOP_K_MAX)
    filters: dict[str, Any] | None = None


class PlatformRequestActionRequest(ProxyRequest):
    action: str = Field(min_length=1)
    target: dict[str, Any] = Field(default_factory=dict)
    payload: dict[str, Any] = Field(default_factory=dict)


class InvokeLLMResult(HostModel):
    message: Message
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None


class LLMStreamChunk(HostModel):
    """One ``continue`` frame of ``invoke_llm_stream``; the last chunk usually carries ``usage``."""

    delta: Message
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None


class RerankItem(HostModel):
    index: int
    """Position of the document in the request."""
    score: float
    document: str | None = None


class RerankResult(HostModel):
    results: list[RerankItem] = Field(default_factory=list)


class CountTokensResult(HostModel):
    tokens: int
    estimated: bool = False
    """True when the host does not know the model's tokenizer (or the input has images): ``tokens`` is
    then an estimate made with a common encoding, good for budgeting, not for billing."""
    encoding: str | None = None
    """The tokenizer the count used (e.g. ``o200k_base``)."""


class ToolDetail(HostModel):
    tool_name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    """JSON Schema of the parameters."""


class CallToolResult(HostModel):
    result: Any = None
    is_error: bool = False


class KnowledgeEntry(HostModel):
    id: str
    content: str
    score: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class RetrieveKnowledgeBaseResult(HostModel):
    entries: list[KnowledgeEntry] = Field(default_factory=list)


class PlatformActionResult(HostModel):
    accepted: bool
    """Whether the host executed (or queued) the action; a refused action raises ``unauthorized``."""
    result: dict[str, Any] = Field(default_factory=dict)


PLATFORM_ACTION_GET = "action.get"
"""The platform action the host answers itself: what became of an earlier request of the same runner and
binding in the run's conversation. Target ``{"request_id": <id>}``; needs no grant and records nothing."""
PLATFORM_ACTION_OUTLIVE_KEY = "may_outlive_run"
"""A payload key the host takes (and removes before delivery): ``true`` lets an approval that comes after
the run ended still execute the action (otherwise the request expires with its run)."""

PlatformActionStatusName = Literal["pending_approval", "executed", "refused", "rejected", "failed", "expired"]


class PlatformActionStatus(HostModel):
    """What became of a platform action request (``api.platform.get_action``)."""

    request_id: int
    action: str
    status: PlatformActionStatusName
    result: dict[str, Any] = Field(default_factory=dict)
    """What the platform answered, once executed."""
    error: dict[str, Any] | None = None
    """``{code, message}`` when it failed, or why it expired: ``expired`` (not decided in time) or
    ``run_ended`` (an operator approved it after its run ended)."""
    may_outlive_run: bool = False
    expires_at: datetime | None = None
    decided_at: datetime | None = None
    executed_at: datetime | None = None
