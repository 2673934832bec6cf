"""Wire action names and the payloads of host-level actions and context proxy actions.

Host → runtime: ``list_agent_runners``, ``run_agent`` (``AgentRunRequest``), ``cancel_run``, ``run_input``
(``RunInput``: more input for a running run of a runner that declares ``steering``), ``ping``.
Runtime → host: one action per proxy method, named as LangBot names them. ``PROXY_REQUEST_MODELS`` maps
every runtime → host action to its strict request model.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

from langbot_sdk.protocol.base import PROTOCOL_VERSION, HostModel, ProxyRequest, RunnerModel
from langbot_sdk.protocol.context import AgentInput
from langbot_sdk.protocol.invoke import (
    CallToolRequest,
    CountTokensRequest,
    GetToolDetailRequest,
    InvokeLLMRequest,
    InvokeLLMStreamRequest,
    InvokeRerankRequest,
    PlatformRequestActionRequest,
    RetrieveKnowledgeBaseRequest,
)
from langbot_sdk.protocol.limits import (
    ARTIFACT_READ_DEFAULT_BYTES,
    ARTIFACT_READ_MAX_BYTES,
    ARTIFACT_UPLOAD_CHUNK_MAX_BYTES,
    EVENT_PAGE_DEFAULT,
    EVENT_PAGE_MAX,
    HISTORY_PAGE_DEFAULT,
    HISTORY_PAGE_MAX,
    HISTORY_SEARCH_TOP_K_DEFAULT,
    HISTORY_SEARCH_TOP_K_MAX,
)
from langbot_sdk.protocol.state import (
    StateDeleteRequest,
    StateGetRequest,
    StateListRequest,
    StateSetRequest,
    StorageDeleteRequest,
    StorageGetRequest,
    StorageListRequest,
    StorageSetRequest,
    decode_base64,
)


class Action(StrEnum):
    # host → runtime
    LIST_AGENT_RUNNERS = "list_agent_runners"
    RUN_AGENT = "run_agent"
    CANCEL_RUN = "cancel_run"
    RUN_INPUT = "run_input"
    PING = "ping"
    # runtime → host
    INVOKE_LLM = "invoke_llm"
    INVOKE_LLM_STREAM = "invoke_llm_stream"
    INVOKE_RERANK = "invoke_rerank"
    COUNT_TOKENS = "count_tokens"
    GET_TOOL_DETAIL = "get_tool_detail"
    CALL_TOOL = "call_tool"
    RETRIEVE_KNOWLEDGE_BASE = "retrieve_knowledge_base"
    HISTORY_PAGE = "history_page"
    HISTORY_SEARCH = "history_search"
    EVENT_GET = "event_get"
    EVENT_PAGE = "event_page"
    ARTIFACT_METADATA = "artifact_metadata"
    ARTIFACT_READ = "artifact_read"
    ARTIFACT_STREAM = "artifact_stream"
    ARTIFACT_UPLOAD_OPEN = "artifact_upload_open"
    ARTIFACT_UPLOAD_CHUNK = "artifact_upload_chunk"
    ARTIFACT_UPLOAD_FINISH = "artifact_upload_finish"
    ARTIFACT_UPLOAD_ABORT = "artifact_upload_abort"
    STATE_GET = "state_get"
    STATE_SET = "state_set"
    STATE_DELETE = "state_delete"
    STATE_LIST = "state_list"
    STORAGE_GET = "storage_get"
    STORAGE_SET = "storage_set"
    STORAGE_DELETE = "storage_delete"
    STORAGE_LIST = "storage_list"
    PLATFORM_REQUEST_ACTION = "platform_request_action"


HOST_TO_RUNTIME_ACTIONS = frozenset(
    {Action.LIST_AGENT_RUNNERS, Action.RUN_AGENT, Action.CANCEL_RUN, Action.RUN_INPUT, Action.PING}
)
RUNTIME_TO_HOST_ACTIONS = frozenset(set(Action) - HOST_TO_RUNTIME_ACTIONS)
STREAMING_ACTIONS = frozenset({Action.RUN_AGENT, Action.INVOKE_LLM_STREAM, Action.ARTIFACT_STREAM})
"""Actions answered with ``continue`` frames followed by one ``end`` frame."""


class CancelRunRequest(HostModel):
    run_id: str
    reason: str | None = None


class RunInput(HostModel):
    """``run_input``: a message the host hands to a running run as more input (the ``steer`` concurrency
    policy), sent only for a runner whose manifest declares the ``steering`` capability. The runner reads
    these in order with ``api.inputs.next()``, after the run's own ``context.input``."""

    run_id: str
    event_id: str
    """The event the message arrived with (``api.events.get`` reads it, when the run may read events)."""
    input: AgentInput


class RunInputResult(RunnerModel):
    """The runtime's answer to ``run_input``, given once the runner has taken the input (``accepted``) or
    will never take it (the run ended, is not in this runtime, or its runner does not declare
    ``steering``: ``accepted`` false, ``reason`` says which)."""

    accepted: bool
    reason: Literal["taken", "not_active", "not_supported", "ended"] = "taken"


class PingResult(RunnerModel):
    """The runtime's answer to ``ping``: liveness plus what a health page wants to show."""

    pong: bool = True
    version: str | None = None
    protocol_version: str = PROTOCOL_VERSION
    uptime_s: float | None = None
    runs_active: int | None = None


class HistoryPageRequest(ProxyRequest):
    conversation_id: str | None = None
    """Defaults to the run's own conversation; another one needs cross-conversation permission."""
    thread_id: str | None = None
    before_cursor: str | None = None
    after_cursor: str | None = None
    limit: int = Field(default=HISTORY_PAGE_DEFAULT, ge=1, le=HISTORY_PAGE_MAX)
    direction: Literal["backward", "forward"] = "backward"
    include_artifacts: bool = False


class HistorySearchFilters(RunnerModel):
    conversation_id: str | None = None
    thread_id: str | None = None
    event_types: list[str] | None = None
    roles: list[str] | None = None


class HistorySearchRequest(ProxyRequest):
    query: str = Field(min_length=1)
    filters: HistorySearchFilters | None = None
    top_k: int = Field(default=HISTORY_SEARCH_TOP_K_DEFAULT, ge=1, le=HISTORY_SEARCH_TOP_K_MAX)


class EventGetRequest(ProxyRequest):
    event_id: str = Field(min_length=1)


class EventPageRequest(ProxyRequest):
    conversation_id: str | None = None
    before_cursor: str | None = None
    after_cursor: str | None = None
    limit: int = Field(default=EVENT_PAGE_DEFAULT, ge=1, le=EVENT_PAGE_MAX)
    event_types: list[str] | None = None


class ArtifactMetadataRequest(ProxyRequest):
    artifact_id: str = Field(min_length=1)


class ArtifactReadRequest(ProxyRequest):
    artifact_id: str = Field(min_length=1)
    offset: int = Field(default=0, ge=0)
    length: int = Field(default=ARTIFACT_READ_DEFAULT_BYTES, ge=1, le=ARTIFACT_READ_MAX_BYTES)


class ArtifactStreamRequest(ProxyRequest):
    artifact_id: str = Field(min_length=1)
    offset: int = Field(default=0, ge=0)
    chunk_size: int = Field(default=ARTIFACT_READ_DEFAULT_BYTES, ge=1, le=ARTIFACT_READ_MAX_BYTES)


SHA256_PATTERN = r"^[0-9a-f]{64}$"

# An upload is four unary calls rather than a new kind of wire frame: `open` answers an `upload_id`, each
# `chunk` carries the next bytes at the offset the host expects, `finish` checks size and sha256 and stores
# the artifact, `abort` drops it. Nothing reaches the artifact storage before `finish`.


class ArtifactUploadOpenRequest(ProxyRequest):
    name: str = Field(min_length=1, max_length=255)
    mime_type: str = Field(default="application/octet-stream", max_length=255)
    """A hint: the stored type is sniffed from the content's first bytes."""
    size: int | None = Field(default=None, ge=0)
    """The total size when known up front, so an over-limit upload is refused before any byte is sent."""


class ArtifactUploadChunkRequest(ProxyRequest):
    upload_id: str = Field(min_length=1, max_length=64)
    offset: int = Field(ge=0)
    """Where these bytes start: the size received so far (chunks are sent in order, none skipped)."""
    data_base64: str

    @field_validator("data_base64")
    @classmethod
    def _chunk_fits(cls, value: str) -> str:
        decode_base64(value, limit=ARTIFACT_UPLOAD_CHUNK_MAX_BYTES, what="upload chunk")
        return value


class ArtifactUploadFinishRequest(ProxyRequest):
    upload_id: str = Field(min_length=1, max_length=64)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=SHA256_PATTERN)
    """Lower-case hex sha256 of the whole content, as the sender computed it."""


class ArtifactUploadAbortRequest(ProxyRequest):
    upload_id: str = Field(min_length=1, max_length=64)


PROXY_REQUEST_MODELS: dict[Action, type[ProxyRequest]] = {
    Action.INVOKE_LLM: InvokeLLMRequest,
    Action.INVOKE_LLM_STREAM: InvokeLLMStreamRequest,
    Action.INVOKE_RERANK: InvokeRerankRequest,
    Action.COUNT_TOKENS: CountTokensRequest,
    Action.GET_TOOL_DETAIL: GetToolDetailRequest,
    Action.CALL_TOOL: CallToolRequest,
    Action.RETRIEVE_KNOWLEDGE_BASE: RetrieveKnowledgeBaseRequest,
    Action.HISTORY_PAGE: HistoryPageRequest,
    Action.HISTORY_SEARCH: HistorySearchRequest,
    Action.EVENT_GET: EventGetRequest,
    Action.EVENT_PAGE: EventPageRequest,
    Action.ARTIFACT_METADATA: ArtifactMetadataRequest,
    Action.ARTIFACT_READ: ArtifactReadRequest,
    Action.ARTIFACT_STREAM: ArtifactStreamRequest,
    Action.ARTIFACT_UPLOAD_OPEN: ArtifactUploadOpenRequest,
    Action.ARTIFACT_UPLOAD_CHUNK: ArtifactUploadChunkRequest,
    Action.ARTIFACT_UPLOAD_FINISH: ArtifactUploadFinishRequest,
    Action.ARTIFACT_UPLOAD_ABORT: ArtifactUploadAbortRequest,
    Action.STATE_GET: StateGetRequest,
    Action.STATE_SET: StateSetRequest,
    Action.STATE_DELETE: StateDeleteRequest,
    Action.STATE_LIST: StateListRequest,
    Action.STORAGE_GET: StorageGetRequest,
    Action.STORAGE_SET: StorageSetRequest,
    Action.STORAGE_DELETE: StorageDeleteRequest,
    Action.STORAGE_LIST: StorageListRequest,
    Action.PLATFORM_REQUEST_ACTION: PlatformRequestActionRequest,
}
