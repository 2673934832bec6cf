"""`AgentRunAPIProxy`: the run-scoped client a runner uses to reach host capabilities (docs/protocol.md, "Runtime →
host").

What belongs here: the proxy and its namespaces (`models`, `tools`, `knowledge`, `history`, `events`,
`artifacts`, `state`, `storage`, `platform`, `inputs`), the local convenience checks made before a call is sent
(authorization against the run's context, caps, deadline), and the binding of a run to the host channel
the plugin runtime provides, visible only to code running for that run. The host re-checks everything;
these checks only fail fast.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import hashlib
import os
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from typing import Any, BinaryIO, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from langbot_sdk.inputs import RunInbox
from langbot_sdk.protocol import (
    PLATFORM_ACTION_GET,
    PLATFORM_ACTION_OUTLIVE_KEY,
    PROXY_REQUEST_MODELS,
    Action,
    AgentAPIError,
    AgentAPIException,
    AgentEventRecord,
    AgentRunContext,
    ArtifactMetadata,
    ArtifactReadResult,
    ArtifactStreamChunk,
    ArtifactUploadOpened,
    ArtifactUploadProgress,
    CallToolResult,
    CountTokensResult,
    ErrorCode,
    EventPage,
    HistoryPage,
    HistorySearchResult,
    InvokeLLMResult,
    LLMStreamChunk,
    Message,
    PlatformActionResult,
    PlatformActionStatus,
    RerankResult,
    RetrieveKnowledgeBaseResult,
    RunInput,
    StateDeleteResult,
    StateGetResult,
    StateListResult,
    StateSetResult,
    StorageDeleteResult,
    StorageGetResult,
    StorageListResult,
    StorageSetResult,
    ToolDetail,
    limits,
    state_value_checked,
)

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_STREAM_TIMEOUT",
    "AgentRunAPIProxy",
    "HostChannel",
    "bind_run_channel",
    "channel_for_run",
    "current_run_id",
    "unbind_run_channel",
]

DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds a unary proxy call may take when the run's deadline is further away."""
DEFAULT_STREAM_TIMEOUT = 600.0
"""Seconds a whole streamed proxy call (model stream, artifact stream) may take."""

_DTO = TypeVar("_DTO", bound=BaseModel)
MessageLike = Message | dict[str, Any]


class HostChannel(Protocol):
    """Where proxy calls go: the plugin runtime's connection to the host that started the run.

    `langbot_sdk.wire.Connection` satisfies it; the runtime wraps it to stamp `caller_plugin_identity` and
    the run token.
    """

    async def call(
        self,
        action: str,
        data: dict[str, Any],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]: ...

    def stream(
        self, action: str, data: dict[str, Any], *, timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]: ...


# --- run id → channel -------------------------------------------------------------------------------
# The runtime binds a run's channel in the run's own task, as a context variable: tasks and threads the
# runner starts from there inherit it (asyncio copies the context), and nothing else can see it. There is
# deliberately no table from run ids to channels: any code in the runtime process could read it and act
# for another plugin's or another workspace's run.

_current_channel: contextvars.ContextVar[tuple[str, HostChannel] | None] = contextvars.ContextVar(
    "langbot_run_channel", default=None
)
# The run's inbox of steered input, bound the same way and for the same reason.
_current_inbox: contextvars.ContextVar[tuple[str, RunInbox] | None] = contextvars.ContextVar(
    "langbot_run_inbox", default=None
)


def bind_run_channel(run_id: str, channel: HostChannel, inbox: RunInbox | None = None) -> None:
    """Make `channel` the host channel of `run_id` in the current context (call it inside the run's task),
    and `inbox` where its steered input arrives (`api.inputs`)."""
    _current_channel.set((run_id, channel))
    _current_inbox.set(None if inbox is None else (run_id, inbox))


def unbind_run_channel(run_id: str, channel: HostChannel) -> None:
    """Forget the binding made by `bind_run_channel`; proxy calls of this context fail afterwards."""
    current = _current_channel.get()
    if current is not None and current[1] is channel:
        _current_channel.set(None)
        _current_inbox.set(None)


def channel_for_run(run_id: str) -> HostChannel | None:
    """The host channel of `run_id` when the calling code runs for that run, else None."""
    current = _current_channel.get()
    if current is not None and current[0] == run_id:
        return current[1]
    return None


def current_run_id() -> str | None:
    """The run the calling code runs for (bound by the runtime), or None outside a run."""
    current = _current_channel.get()
    return None if current is None else current[0]


# --- the proxy --------------------------------------------------------------------------------------


def _unauthorized(message: str, **details: Any) -> AgentAPIException:
    return AgentAPIException.unauthorized(message, **details)


def _message_dicts(messages: Sequence[MessageLike]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_none=True) if isinstance(m, BaseModel) else m for m in messages]


class AgentRunAPIProxy:
    """Host APIs for one run; obtain it with `AgentRunner.run_api(ctx)`.

    Every call carries the run id, is checked locally against `ctx` (unauthorized APIs and resources,
    caps, the run deadline) and fails with `AgentAPIException` whose `.error` is the host's
    `AgentAPIError`.
    """

    def __init__(
        self,
        ctx: AgentRunContext,
        channel: HostChannel | None = None,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ctx = ctx
        self.run_id = ctx.run_id
        self._channel = channel
        self._call_timeout = call_timeout
        self._stream_timeout = stream_timeout
        self._clock = clock
        self.models = ModelsAPI(self)
        self.tools = ToolsAPI(self)
        self.knowledge = KnowledgeAPI(self)
        self.history = HistoryAPI(self)
        self.events = EventsAPI(self)
        self.artifacts = ArtifactsAPI(self)
        self.state = StateAPI(self)
        self.storage = StorageAPI(self)
        self.platform = PlatformAPI(self)
        self.inputs = InputsAPI(self)

    # -- plumbing shared by the namespaces ---------------------------------------------------------

    def _resolve_channel(self) -> HostChannel:
        channel = self._channel or channel_for_run(self.run_id)
        if channel is not None:
            return channel
        own = current_run_id()
        if own is not None:
            # Code running for one run cannot borrow the host channel of another (docs/protocol.md, "Runtime → host").
            raise _unauthorized(
                f"this code runs for run {own}; it cannot call host APIs for run {self.run_id}",
                run_id=self.run_id,
            )
        raise AgentAPIException.runtime_error(
            f"run {self.run_id} is not active in this runtime; host APIs are unavailable"
        )

    def _timeout(self, default: float) -> float:
        deadline = self.ctx.runtime.deadline_at
        if deadline is None:
            return default
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise AgentAPIException.deadline_exceeded("the run's deadline has passed", deadline_at=deadline)
        return min(default, remaining)

    def _payload(self, action: Action, fields: dict[str, Any]) -> dict[str, Any]:
        """Validate the request locally with the protocol's strict model; return the wire payload."""
        data = {"run_id": self.run_id, **fields}
        try:
            PROXY_REQUEST_MODELS[action].model_validate(data)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            code = ErrorCode.INVALID_ARGUMENT
            if any("larger than the limit" in e["msg"] or "the limit is" in e["msg"] for e in errors):
                code = ErrorCode.PAYLOAD_TOO_LARGE
            raise AgentAPIException.of(
                code,
                f"invalid arguments for {action.value}",
                errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in errors],
            ) from None
        return data

    async def _call(self, action: Action, fields: dict[str, Any], result_model: type[_DTO]) -> _DTO:
        data = self._payload(action, fields)
        timeout = self._timeout(self._call_timeout)
        channel = self._resolve_channel()
        try:
            answer = await channel.call(action.value, data, timeout=timeout)
        except AgentAPIException as exc:
            raise AgentAPIException(exc.error) from None
        return _parse(result_model, answer, action)

    async def _stream(self, action: Action, fields: dict[str, Any], item_model: type[_DTO]) -> AsyncIterator[_DTO]:
        data = self._payload(action, fields)
        timeout = self._timeout(self._stream_timeout)
        channel = self._resolve_channel()
        items = channel.stream(action.value, data, timeout=timeout)
        try:
            async for item in items:
                yield _parse(item_model, item, action)
        except AgentAPIException as exc:
            raise AgentAPIException(exc.error) from None
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()

    # -- local authorization (convenience; the host is the boundary) --------------------------------

    def _require_model(self, model_id: str, operation: str | None) -> None:
        model = self.ctx.resources.find_model(model_id)
        if model is None:
            raise _unauthorized(f"model {model_id!r} is not authorized for this run", model_id=model_id)
        if operation is not None and model.operations and operation not in model.operations:
            raise _unauthorized(
                f"model {model_id!r} is not authorized for {operation}",
                model_id=model_id,
                operation=operation,
            )

    def _require_tool(self, tool_name: str, operation: str) -> None:
        tool = self.ctx.resources.find_tool(tool_name)
        if tool is None:
            raise _unauthorized(f"tool {tool_name!r} is not authorized for this run", tool_name=tool_name)
        if tool.operations and operation not in tool.operations:
            raise _unauthorized(
                f"tool {tool_name!r} is not authorized for {operation}",
                tool_name=tool_name,
                operation=operation,
            )

    def _require_knowledge_base(self, kb_id: str) -> None:
        kb = self.ctx.resources.find_knowledge_base(kb_id)
        if kb is None or (kb.operations and "retrieve" not in kb.operations):
            raise _unauthorized(f"knowledge base {kb_id!r} is not authorized for this run", kb_id=kb_id)

    def _require_api(self, api: str, allowed: bool) -> None:
        if not allowed:
            raise _unauthorized(f"the {api} API is not available to this run", api=api)

    def _require_conversation(self, conversation_id: str | None) -> None:
        if conversation_id is None or self.ctx.resources.history.cross_conversation:
            return
        own = {self.ctx.context.conversation_id}
        if self.ctx.conversation is not None:
            own.add(self.ctx.conversation.conversation_id)
        if conversation_id not in own:
            raise _unauthorized(
                "reading another conversation is not authorized for this run",
                conversation_id=conversation_id,
            )

    def _require_artifact(self, artifact_id: str, operation: str, api_allowed: bool) -> None:
        if api_allowed:
            return
        for artifact in self.ctx.resources.artifacts:
            if artifact.artifact_id == artifact_id and (not artifact.operations or operation in artifact.operations):
                return
        raise _unauthorized(
            f"artifact {operation} is not available to this run", artifact_id=artifact_id, operation=operation
        )

    def _require_state_scope(self, scope: str) -> None:
        apis, resource = self.ctx.context.available_apis, self.ctx.resources.state
        self._require_api("state", apis.state or resource.enabled)
        if resource.scopes and scope not in resource.scopes:
            raise _unauthorized(f"state scope {scope!r} is not authorized for this run", scope=scope)

    def _require_storage_area(self, area: str) -> None:
        self._require_api("storage", self.ctx.context.available_apis.storage)
        if area not in self.ctx.resources.storage.areas:
            raise _unauthorized(f"storage area {area!r} is not authorized for this run", area=area)

    def _require_platform_action(self, action: str) -> None:
        capabilities = self.ctx.resources.platform_capabilities
        declared = capabilities.get("actions")
        allowed = bool(capabilities.get(action)) or (isinstance(declared, list) and action in declared)
        if not allowed:
            raise _unauthorized(f"platform action {action!r} is not authorized for this run", action=action)


def _parse(model: type[_DTO], data: dict[str, Any], action: Action) -> _DTO:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise AgentAPIException(
            AgentAPIError(
                code=ErrorCode.RUNTIME_ERROR,
                message=f"the host answered {action.value} with an invalid {model.__name__}",
                details={"errors": [e["msg"] for e in exc.errors(include_url=False)][:10]},
            )
        ) from None


def _clamp(value: int, maximum: int) -> int:
    return max(1, min(value, maximum))


class _Namespace:
    def __init__(self, proxy: AgentRunAPIProxy) -> None:
        self._proxy = proxy


class ModelsAPI(_Namespace):
    """`api.models`: LLM invocation, streaming, reranking and token counting on authorized models."""

    async def invoke(
        self,
        model_id: str,
        messages: Sequence[MessageLike],
        tools: list[dict[str, Any]] | None = None,
        extra_args: dict[str, Any] | None = None,
    ) -> InvokeLLMResult:
        self._proxy._require_model(model_id, "invoke")
        fields = _llm_fields(model_id, messages, tools, extra_args)
        return await self._proxy._call(Action.INVOKE_LLM, fields, InvokeLLMResult)

    async def stream(
        self,
        model_id: str,
        messages: Sequence[MessageLike],
        tools: list[dict[str, Any]] | None = None,
        extra_args: dict[str, Any] | None = None,
    ) -> AsyncIterator[LLMStreamChunk]:
        """Iterate the model's output chunks (`async for chunk in api.models.stream(...)`)."""
        self._proxy._require_model(model_id, "stream")
        fields = _llm_fields(model_id, messages, tools, extra_args)
        async for chunk in self._proxy._stream(Action.INVOKE_LLM_STREAM, fields, LLMStreamChunk):
            yield chunk

    async def rerank(
        self, model_id: str, query: str, documents: Sequence[str], top_k: int | None = None
    ) -> RerankResult:
        self._proxy._require_model(model_id, "rerank")
        fields: dict[str, Any] = {"model_id": model_id, "query": query, "documents": list(documents)}
        if top_k is not None:
            fields["top_k"] = top_k
        return await self._proxy._call(Action.INVOKE_RERANK, fields, RerankResult)

    async def count_tokens(
        self, model_id: str, messages: Sequence[MessageLike] = (), text: str | None = None
    ) -> CountTokensResult:
        self._proxy._require_model(model_id, None)
        fields: dict[str, Any] = {"model_id": model_id, "messages": _message_dicts(messages)}
        if text is not None:
            fields["text"] = text
        return await self._proxy._call(Action.COUNT_TOKENS, fields, CountTokensResult)


def _llm_fields(
    model_id: str,
    messages: Sequence[MessageLike],
    tools: list[dict[str, Any]] | None,
    extra_args: dict[str, Any] | None,
) -> dict[str, Any]:
    fields: dict[str, Any] = {"model_id": model_id, "messages": _message_dicts(messages)}
    if tools is not None:
        fields["tools"] = tools
    if extra_args is not None:
        fields["extra_args"] = extra_args
    return fields


class ToolsAPI(_Namespace):
    """`api.tools`: describe and call authorized tools."""

    async def get_detail(self, tool_name: str) -> ToolDetail:
        self._proxy._require_tool(tool_name, "detail")
        return await self._proxy._call(Action.GET_TOOL_DETAIL, {"tool_name": tool_name}, ToolDetail)

    async def call(self, tool_name: str, parameters: dict[str, Any] | None = None) -> CallToolResult:
        self._proxy._require_tool(tool_name, "call")
        fields = {"tool_name": tool_name, "parameters": parameters or {}}
        return await self._proxy._call(Action.CALL_TOOL, fields, CallToolResult)


class KnowledgeAPI(_Namespace):
    """`api.knowledge`: retrieval from authorized knowledge bases (top_k clamped to the cap)."""

    async def retrieve(
        self,
        kb_id: str,
        query_text: str,
        top_k: int = limits.KNOWLEDGE_TOP_K_DEFAULT,
        filters: dict[str, Any] | None = None,
    ) -> RetrieveKnowledgeBaseResult:
        self._proxy._require_knowledge_base(kb_id)
        fields: dict[str, Any] = {
            "kb_id": kb_id,
            "query_text": query_text,
            "top_k": _clamp(top_k, limits.KNOWLEDGE_TOP_K_MAX),
        }
        if filters is not None:
            fields["filters"] = filters
        return await self._proxy._call(Action.RETRIEVE_KNOWLEDGE_BASE, fields, RetrieveKnowledgeBaseResult)


class HistoryAPI(_Namespace):
    """`api.history`: transcript pages and search (page size and top_k clamped to the caps)."""

    async def page(
        self,
        conversation_id: str | None = None,
        before_cursor: str | None = None,
        after_cursor: str | None = None,
        limit: int = limits.HISTORY_PAGE_DEFAULT,
        direction: str = "backward",
        include_artifacts: bool = False,
        thread_id: str | None = None,
    ) -> HistoryPage:
        """A page of the run's conversation transcript, items oldest first.

        Cursors are opaque strings (each item has its own `cursor`). `direction="backward"` walks to older
        items from `before_cursor` (from the newest item without one); `"forward"` walks to newer items
        from `after_cursor` (from the oldest without one). `next_cursor` continues in the same direction
        and is None when nothing more exists there now; `prev_cursor` walks the other way. `limit` is
        clamped to 100 (by this SDK and by the host). Another conversation answers `not_found`.

        `ctx.context.latest_cursor` is the cursor of the newest item *before* the current input, so the
        current input comes after it: `page(after_cursor=ctx.context.latest_cursor, direction="forward")`
        starts with the current input. To read the history before the current input, including the
        `latest_cursor` item, page backward from the current input's own cursor,
        `before_cursor=str(ctx.context.transcript_seq)`. `latest_cursor` is None when there is no history.
        """
        proxy = self._proxy
        resources = proxy.ctx.resources.history
        proxy._require_api("history.page", proxy.ctx.context.available_apis.history_page or resources.page)
        proxy._require_conversation(conversation_id)
        fields: dict[str, Any] = {
            "limit": _clamp(limit, min(limits.HISTORY_PAGE_MAX, resources.max_page_size)),
            "direction": direction,
            "include_artifacts": include_artifacts,
        }
        _set_optional(
            fields,
            conversation_id=conversation_id,
            thread_id=thread_id,
            before_cursor=before_cursor,
            after_cursor=after_cursor,
        )
        return await proxy._call(Action.HISTORY_PAGE, fields, HistoryPage)

    async def search(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = limits.HISTORY_SEARCH_TOP_K_DEFAULT,
    ) -> HistorySearchResult:
        proxy = self._proxy
        resources = proxy.ctx.resources.history
        proxy._require_api("history.search", proxy.ctx.context.available_apis.history_search or resources.search)
        if filters is not None:
            proxy._require_conversation(filters.get("conversation_id"))
        fields: dict[str, Any] = {
            "query": query,
            "top_k": _clamp(top_k, min(limits.HISTORY_SEARCH_TOP_K_MAX, resources.max_search_top_k)),
        }
        if filters is not None:
            fields["filters"] = filters
        return await proxy._call(Action.HISTORY_SEARCH, fields, HistorySearchResult)


class EventsAPI(_Namespace):
    """`api.events`: event envelopes of the run's scope (page size clamped to the cap)."""

    async def get(self, event_id: str) -> AgentEventRecord:
        proxy = self._proxy
        proxy._require_api(
            "events.get", proxy.ctx.context.available_apis.event_get or proxy.ctx.resources.history.event_get
        )
        return await proxy._call(Action.EVENT_GET, {"event_id": event_id}, AgentEventRecord)

    async def page(
        self,
        before_cursor: str | None = None,
        limit: int = limits.EVENT_PAGE_DEFAULT,
        *,
        after_cursor: str | None = None,
        conversation_id: str | None = None,
        event_types: list[str] | None = None,
    ) -> EventPage:
        proxy = self._proxy
        proxy._require_api(
            "events.page",
            proxy.ctx.context.available_apis.event_page or proxy.ctx.resources.history.event_page,
        )
        proxy._require_conversation(conversation_id)
        fields: dict[str, Any] = {"limit": _clamp(limit, limits.EVENT_PAGE_MAX)}
        _set_optional(
            fields,
            before_cursor=before_cursor,
            after_cursor=after_cursor,
            conversation_id=conversation_id,
            event_types=event_types,
        )
        return await proxy._call(Action.EVENT_PAGE, fields, EventPage)


UploadSource = (
    str | os.PathLike[str] | bytes | bytearray | memoryview | AsyncIterable[bytes] | Iterable[bytes] | BinaryIO
)
"""What `api.artifacts.upload` takes: a file path, bytes, an open binary file, or a sync/async iterable of bytes."""


class ArtifactsAPI(_Namespace):
    """`api.artifacts`: metadata, byte-range reads (length clamped to the cap), chunked streams and uploads."""

    async def upload(
        self,
        source: UploadSource,
        *,
        name: str | None = None,
        mime_type: str = "application/octet-stream",
        size: int | None = None,
        chunk_size: int = limits.ARTIFACT_UPLOAD_CHUNK_DEFAULT_BYTES,
    ) -> ArtifactMetadata:
        """Upload `source` as an artifact of this run and return its metadata (docs/protocol.md, "Artifact
        uploads"). The content is sent in chunks as it is read, so memory holds one chunk whatever the size;
        the host checks the size against the workspace's limit, verifies the sha256 computed here and sniffs
        the type (`mime_type` is a hint). Announce it to the user with
        `AgentRunResult.artifact_created(ctx.run_id, meta.name, meta.mime_type, artifact_id=meta.artifact_id)`.
        On any failure the upload is aborted and nothing is kept."""
        self._require_upload()
        chunk_size = _clamp(chunk_size, limits.ARTIFACT_UPLOAD_CHUNK_MAX_BYTES)
        if isinstance(source, str | os.PathLike):
            path = os.fspath(source)
            name = name or os.path.basename(path)
            size = size if size is not None else await asyncio.to_thread(os.path.getsize, path)
            pieces: AsyncIterator[bytes] = _file_chunks(path, chunk_size)
        else:
            if isinstance(source, bytes | bytearray | memoryview):
                size = size if size is not None else len(source)
            pieces = _chunks_of(source, chunk_size)
        if not name:
            raise AgentAPIException.invalid_argument("an upload needs a name", field="name")
        opened = await self.upload_open(name, mime_type=mime_type, size=size)
        upload_id = opened.upload_id
        digest = hashlib.sha256()
        sent = 0
        try:
            async for piece in _rechunked(pieces, min(chunk_size, opened.chunk_max_bytes)):
                digest.update(piece)
                await self.upload_chunk(upload_id, sent, piece)
                sent += len(piece)
            return await self.upload_finish(upload_id, size=sent, sha256=digest.hexdigest())
        except BaseException:
            # The host drops an upload that fails at finish, and one whose run ends; an abort frees it now.
            with contextlib.suppress(Exception):
                await self.upload_abort(upload_id)
            raise

    # The four steps `upload` is made of, for a runner that drives an upload itself (say, chunks it
    # produces over time). Each is refused here, without reaching the host, when the run's context does
    # not open uploads (`available_apis.artifact_upload`).

    async def upload_open(
        self, name: str, *, mime_type: str = "application/octet-stream", size: int | None = None
    ) -> ArtifactUploadOpened:
        """Open an upload; the answer carries its `upload_id`, the workspace's limit and the largest chunk."""
        proxy = self._require_upload()
        fields: dict[str, Any] = {"name": name, "mime_type": mime_type}
        if size is not None:
            fields["size"] = size
        return await proxy._call(Action.ARTIFACT_UPLOAD_OPEN, fields, ArtifactUploadOpened)

    async def upload_chunk(self, upload_id: str, offset: int, data: bytes) -> ArtifactUploadProgress:
        """Send the bytes at `offset` (chunks go in order: `offset` is what the host has received)."""
        proxy = self._require_upload()
        chunk = {"upload_id": upload_id, "offset": offset, "data_base64": base64.b64encode(data).decode("ascii")}
        return await proxy._call(Action.ARTIFACT_UPLOAD_CHUNK, chunk, ArtifactUploadProgress)

    async def upload_finish(self, upload_id: str, *, size: int, sha256: str) -> ArtifactMetadata:
        """Close the upload; the host checks the total size and sha256, then stores it as an artifact."""
        proxy = self._require_upload()
        finish = {"upload_id": upload_id, "size": size, "sha256": sha256}
        return await proxy._call(Action.ARTIFACT_UPLOAD_FINISH, finish, ArtifactMetadata)

    async def upload_abort(self, upload_id: str) -> ArtifactUploadProgress:
        """Drop an open upload; nothing of it is kept."""
        proxy = self._require_upload()
        return await proxy._call(Action.ARTIFACT_UPLOAD_ABORT, {"upload_id": upload_id}, ArtifactUploadProgress)

    def _require_upload(self) -> AgentRunAPIProxy:
        proxy = self._proxy
        proxy._require_api("artifacts.upload", proxy.ctx.context.available_apis.artifact_upload)
        return proxy

    async def metadata(self, artifact_id: str) -> ArtifactMetadata:
        proxy = self._proxy
        proxy._require_artifact(artifact_id, "metadata", proxy.ctx.context.available_apis.artifact_metadata)
        return await proxy._call(Action.ARTIFACT_METADATA, {"artifact_id": artifact_id}, ArtifactMetadata)

    async def read_range(
        self, artifact_id: str, offset: int = 0, length: int = limits.ARTIFACT_READ_DEFAULT_BYTES
    ) -> ArtifactReadResult:
        proxy = self._proxy
        proxy._require_artifact(artifact_id, "read", proxy.ctx.context.available_apis.artifact_read)
        fields = {"artifact_id": artifact_id, "offset": offset, "length": _clamp(length, self._max_read())}
        return await proxy._call(Action.ARTIFACT_READ, fields, ArtifactReadResult)

    async def open_stream(
        self, artifact_id: str, offset: int = 0, chunk_size: int = limits.ARTIFACT_READ_DEFAULT_BYTES
    ) -> AsyncIterator[ArtifactStreamChunk]:
        """Iterate the artifact's content in chunks (`async for chunk in api.artifacts.open_stream(id)`)."""
        proxy = self._proxy
        proxy._require_artifact(artifact_id, "read", proxy.ctx.context.available_apis.artifact_read)
        fields = {
            "artifact_id": artifact_id,
            "offset": offset,
            "chunk_size": _clamp(chunk_size, self._max_read()),
        }
        async for chunk in proxy._stream(Action.ARTIFACT_STREAM, fields, ArtifactStreamChunk):
            yield chunk

    def _max_read(self) -> int:
        return min(limits.ARTIFACT_READ_MAX_BYTES, self._proxy.ctx.resources.history.max_artifact_read_bytes)


async def _file_chunks(path: str, chunk_size: int) -> AsyncIterator[bytes]:
    # Reads happen in a thread: a slow disk must not stall the runtime's event loop.
    handle = await asyncio.to_thread(open, path, "rb")
    try:
        while piece := await asyncio.to_thread(handle.read, chunk_size):
            yield piece
    finally:
        await asyncio.to_thread(handle.close)


async def _chunks_of(source: Any, chunk_size: int) -> AsyncIterator[bytes]:
    if isinstance(source, bytes | bytearray | memoryview):
        view = memoryview(source)
        for start in range(0, len(view), chunk_size):
            yield bytes(view[start : start + chunk_size])
    elif hasattr(source, "read"):
        while piece := await asyncio.to_thread(source.read, chunk_size):
            yield bytes(piece)
    elif isinstance(source, AsyncIterable):
        async for piece in source:
            yield bytes(piece)
    elif isinstance(source, Iterable):
        for piece in source:
            yield bytes(piece)
    else:
        raise AgentAPIException.invalid_argument(
            f"cannot upload a {type(source).__name__}: pass a path, bytes, a binary file or an iterable of bytes"
        )


async def _rechunked(pieces: AsyncIterator[bytes], size: int) -> AsyncIterator[bytes]:
    """Pieces of any size in, chunks of exactly `size` out (the last one shorter)."""
    buffer = bytearray()
    async for piece in pieces:
        buffer += piece
        while len(buffer) >= size:
            yield bytes(buffer[:size])
            del buffer[:size]
    if buffer:
        yield bytes(buffer)


class StateAPI(_Namespace):
    """`api.state`: small JSON values (≤ 256 KiB) per conversation/actor/subject/runner/binding scope."""

    async def get(self, scope: str, key: str) -> StateGetResult:
        self._proxy._require_state_scope(scope)
        return await self._proxy._call(Action.STATE_GET, {"scope": scope, "key": key}, StateGetResult)

    async def set(self, scope: str, key: str, value: Any) -> StateSetResult:
        self._proxy._require_state_scope(scope)
        state_value_checked(value)
        fields = {"scope": scope, "key": key, "value": value}
        return await self._proxy._call(Action.STATE_SET, fields, StateSetResult)

    async def delete(self, scope: str, key: str) -> StateDeleteResult:
        self._proxy._require_state_scope(scope)
        return await self._proxy._call(Action.STATE_DELETE, {"scope": scope, "key": key}, StateDeleteResult)

    async def list(
        self, scope: str, prefix: str | None = None, limit: int = limits.STATE_LIST_MAX_KEYS
    ) -> StateListResult:
        self._proxy._require_state_scope(scope)
        fields: dict[str, Any] = {"scope": scope, "limit": _clamp(limit, limits.STATE_LIST_MAX_KEYS)}
        _set_optional(fields, prefix=prefix)
        return await self._proxy._call(Action.STATE_LIST, fields, StateListResult)


class StorageAPI(_Namespace):
    """`api.storage`: bytes (≤ 10 MiB) per plugin/workspace/binding area."""

    async def get(self, area: str, key: str) -> StorageGetResult:
        self._proxy._require_storage_area(area)
        return await self._proxy._call(Action.STORAGE_GET, {"area": area, "key": key}, StorageGetResult)

    async def set(self, area: str, key: str, value: bytes | str) -> StorageSetResult:
        """Store `value` (bytes, or text stored as UTF-8)."""
        self._proxy._require_storage_area(area)
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if len(raw) > limits.STORAGE_VALUE_MAX_BYTES:
            raise AgentAPIException.payload_too_large(
                f"storage value is {len(raw)} bytes; the limit is {limits.STORAGE_VALUE_MAX_BYTES}",
                size=len(raw),
                max_bytes=limits.STORAGE_VALUE_MAX_BYTES,
            )
        fields = {"area": area, "key": key, "value_base64": base64.b64encode(raw).decode("ascii")}
        return await self._proxy._call(Action.STORAGE_SET, fields, StorageSetResult)

    async def delete(self, area: str, key: str) -> StorageDeleteResult:
        self._proxy._require_storage_area(area)
        return await self._proxy._call(Action.STORAGE_DELETE, {"area": area, "key": key}, StorageDeleteResult)

    async def list(
        self, area: str, prefix: str | None = None, limit: int = limits.STORAGE_LIST_MAX_KEYS
    ) -> StorageListResult:
        self._proxy._require_storage_area(area)
        fields: dict[str, Any] = {"area": area, "limit": _clamp(limit, limits.STORAGE_LIST_MAX_KEYS)}
        _set_optional(fields, prefix=prefix)
        return await self._proxy._call(Action.STORAGE_LIST, fields, StorageListResult)


class PlatformAPI(_Namespace):
    """`api.platform`: ask the host to perform a platform action (off unless explicitly authorized)."""

    async def request_action(
        self,
        action: str,
        target: dict[str, Any] | None = None,
        payload: dict[str, Any] | None = None,
        *,
        may_outlive_run: bool = False,
    ) -> PlatformActionResult:
        """Ask for `action`. One waiting for an operator raises `unauthorized` with `details.status:
        pending_approval` and `details.request_id` (read its outcome with `get_action`); it expires with the
        run unless `may_outlive_run`, which lets an approval after the run ended still execute it."""
        self._proxy._require_platform_action(action)
        payload = dict(payload or {})
        if may_outlive_run:
            payload[PLATFORM_ACTION_OUTLIVE_KEY] = True
        fields = {"action": action, "target": target or {}, "payload": payload}
        return await self._proxy._call(Action.PLATFORM_REQUEST_ACTION, fields, PlatformActionResult)

    async def get_action(self, request_id: int) -> PlatformActionStatus:
        """What became of an earlier request of this runner and binding in this conversation: `status` is
        `pending_approval`, `executed` (with `result`), `rejected`, `expired`, `failed` or `refused`."""
        fields = {"action": PLATFORM_ACTION_GET, "target": {"request_id": request_id}, "payload": {}}
        answer = await self._proxy._call(Action.PLATFORM_REQUEST_ACTION, fields, PlatformActionResult)
        return _parse(PlatformActionStatus, answer.result, Action.PLATFORM_REQUEST_ACTION)


class InputsAPI(_Namespace):
    """More input for this run while it runs: the messages the host hands to it under a binding's `steer`
    concurrency policy, in order, after `ctx.input`. Only a runner whose manifest declares the `steering`
    capability gets any; a message that arrives while such a runner runs is then not a run of its own, so
    read them before the run ends (what is left unread when it ends is given a run of its own by the
    host)."""

    def _inbox(self) -> RunInbox:
        current = _current_inbox.get()
        if current is not None and current[0] == self._proxy.run_id:
            return current[1]
        self._proxy._resolve_channel()  # raises the error a call of this run would get here
        raise AgentAPIException.runtime_error(f"run {self._proxy.run_id} has no input channel in this runtime")

    async def next(self, timeout: float | None = None) -> RunInput | None:
        """The next message handed to this run, waiting up to `timeout` seconds (None: until one comes or
        the run ends); None when none came in time."""
        return await self._inbox().next(timeout)

    def pending(self) -> list[RunInput]:
        """Every message already handed to this run and not yet read, without waiting."""
        return self._inbox().pending()


def _set_optional(fields: dict[str, Any], **values: Any) -> None:
    for name, value in values.items():
        if value is not None:
            fields[name] = value
