"""The run-scoped host bridge: an MCP server that lets an external coding harness reach the host.

A harness (Claude Code, Codex, ...) runs as a child process and speaks MCP, not the runner protocol. The
bridge is a streamable-HTTP MCP server the runner starts inside the plugin runtime for one run:

* it listens on ``127.0.0.1`` on a port the kernel chooses, and answers only requests carrying
  ``Authorization: Bearer <token>``, a random token made for this run (compared in constant time);
  anything else gets 401;
* each tool forwards to the run's ``AgentRunAPIProxy`` — the host's own handlers answer, authorize against
  the run's frozen snapshot and audit the call, exactly as for any runner proxy call; a refusal comes back
  as an MCP tool error carrying the host's error code;
* only the tools whose APIs this run may use are listed (the current event always);
* it is stopped when the run ends (``async with`` leaves), so the token and the port stop working; the host
  also refuses the run's proxy credential once the run is over.

The MCP SDK and uvicorn are imported lazily: only harness runners need them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from langbot_sdk.protocol import AgentAPIException, AgentRunContext
from langbot_sdk.proxy import AgentRunAPIProxy

if TYPE_CHECKING:
    import uvicorn

__all__ = ["BRIDGE_SERVER_NAME", "HostBridge", "bridge_tool_names"]

logger = logging.getLogger(__name__)

BRIDGE_SERVER_NAME = "langbot"
"""The bridge's name in the harness's MCP config (Claude Code shows its tools as ``mcp__langbot__<tool>``)."""
MCP_PATH = "/mcp"
RESULT_MAX_CHARS = 256 * 1024
"""Longest JSON text one bridge tool answers with (larger answers are cut and marked)."""
ARTIFACT_READ_MAX_BYTES = 128 * 1024
"""Most bytes `langbot_artifact_read` returns per call (base64 or text, well inside `RESULT_MAX_CHARS`)."""
_STARTUP_TIMEOUT = 10.0

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def bridge_tool_names(ctx: AgentRunContext) -> list[str]:
    """The bridge tools this run gets: those whose host APIs the run may call."""
    apis, resources = ctx.context.available_apis, ctx.resources
    names = ["langbot_current_event"]
    if apis.history_page or resources.history.page:
        names.append("langbot_history_page")
    if apis.history_search or resources.history.search:
        names.append("langbot_history_search")
    if any(not kb.operations or "retrieve" in kb.operations for kb in resources.knowledge_bases):
        names.append("langbot_knowledge_retrieve")
    if any(not tool.operations or "call" in tool.operations for tool in resources.tools):
        names += ["langbot_list_tools", "langbot_call_tool"]
    if apis.event_get or resources.history.event_get:
        names.append("langbot_event_get")
    if apis.event_page or resources.history.event_page:
        names.append("langbot_event_page")
    # Attachments are readable when the run may pull artifacts, or when some are granted to it by id.
    if apis.artifact_metadata or any(not a.operations or "metadata" in a.operations for a in resources.artifacts):
        names.append("langbot_artifact_metadata")
    if apis.artifact_read or any(not a.operations or "read" in a.operations for a in resources.artifacts):
        names.append("langbot_artifact_read")
    if apis.state or resources.state.enabled:
        names += ["langbot_state_get", "langbot_state_list"]
    return names


def _dumped(value: BaseModel | dict[str, Any] | list[Any]) -> str:
    data = value.model_dump(mode="json", exclude_none=True) if isinstance(value, BaseModel) else value
    text = json.dumps(data, ensure_ascii=False)
    if len(text) > RESULT_MAX_CHARS:
        return json.dumps({"truncated": True, "partial_json": text[:RESULT_MAX_CHARS]})
    return text


class _BearerGuard:
    """ASGI middleware: HTTP requests without the run's bearer token answer 401 and reach nothing."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers") or []:
                if name.lower() == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self._expected):
                body = b'{"error": "missing or invalid bridge token"}'
                headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        elif scope["type"] != "lifespan":
            return  # websockets are not part of the bridge
        await self._app(scope, receive, send)


class HostBridge:
    """One run's MCP bridge; use ``async with HostBridge(ctx, api) as bridge:`` inside the run.

    ``bridge.url`` and ``bridge.token`` go into the harness's MCP config (``mcp_server_config()``).
    ``calls`` lists the tools called, in order (for the runner's own diagnostics).
    """

    def __init__(self, ctx: AgentRunContext, api: AgentRunAPIProxy, *, host: str = "127.0.0.1") -> None:
        self.ctx = ctx
        self.api = api
        self.host = host
        self.token = secrets.token_urlsafe(32)
        self.port = 0
        self.calls: list[str] = []
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._session_cm: contextlib.AbstractAsyncContextManager[Any] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{MCP_PATH}"

    def mcp_server_config(self) -> dict[str, Any]:
        """The bridge's entry of an ``mcpServers`` map (Claude Code's ``.mcp.json`` / ``--mcp-config``)."""
        return {"type": "http", "url": self.url, "headers": {"Authorization": f"Bearer {self.token}"}}

    # -- tools ----------------------------------------------------------------------------------------

    def _build_server(self) -> Any:
        from mcp.server.mcpserver import MCPServer

        server = MCPServer(
            "langbot-host-bridge",
            instructions=(
                "LangBot host bridge for this run: the current IM event, the conversation's history and "
                "events, its attachments and artifacts, state, authorized knowledge bases and tools. Every "
                "call is authorized and audited by the host."
            ),
            log_level="WARNING",
        )
        available = set(bridge_tool_names(self.ctx))
        tools: dict[str, tuple[Callable[..., Any], str]] = {
            "langbot_current_event": (
                self._current_event,
                "The event this run answers: its type, source, actor, conversation and input.",
            ),
            "langbot_history_page": (
                self._history_page,
                "A page of this conversation's transcript, oldest first. Without cursors: the newest items "
                "(direction backward). Pass next_cursor back as before_cursor (backward) or after_cursor "
                "(forward) to continue.",
            ),
            "langbot_history_search": (self._history_search, "Search this conversation's transcript."),
            "langbot_knowledge_retrieve": (
                self._knowledge_retrieve,
                "Retrieve passages from an authorized knowledge base (kb_id from agent-context.json).",
            ),
            "langbot_list_tools": (self._list_tools, "The LangBot tools this run may call, with their parameters."),
            "langbot_call_tool": (
                self._call_tool,
                "Call an authorized LangBot tool by name with its arguments (an object matching its parameters).",
            ),
            "langbot_event_get": (self._event_get, "One event of this conversation by its event_id."),
            "langbot_event_page": (
                self._event_page,
                "A page of this conversation's events, newest first; pass next_cursor back as before_cursor.",
            ),
            "langbot_artifact_metadata": (
                self._artifact_metadata,
                "Name, MIME type, size and sha256 of an attachment or artifact (artifact_id from the context).",
            ),
            "langbot_artifact_read": (
                self._artifact_read,
                "Read bytes of an attachment or artifact from offset (at most 128 KiB a call): UTF-8 text as "
                "`text`, anything else as `data_base64`; `eof` says whether the end was reached.",
            ),
            "langbot_state_get": (
                self._state_get,
                "A value LangBot keeps for this run's scope (conversation, actor, subject, runner, binding).",
            ),
            "langbot_state_list": (self._state_list, "The keys LangBot keeps for a state scope."),
        }
        for name, (fn, description) in tools.items():
            if name in available:
                server.add_tool(fn, name=name, description=description, structured_output=False)
        return server

    async def _forward(self, name: str, call: Callable[[], Awaitable[BaseModel | dict[str, Any] | list[Any]]]) -> str:
        from mcp.server.mcpserver.exceptions import ToolError

        self.calls.append(name)
        try:
            return _dumped(await call())
        except AgentAPIException as exc:
            raise ToolError(f"{exc.error.code}: {exc.error.message}") from None

    async def _current_event(self) -> str:
        ctx = self.ctx

        async def answer() -> dict[str, Any]:
            event: dict[str, Any] = {
                "event": ctx.event.model_dump(mode="json", exclude_none=True),
                "actor": ctx.actor.model_dump(mode="json", exclude_none=True) if ctx.actor else None,
                "subject": ctx.subject.model_dump(mode="json", exclude_none=True) if ctx.subject else None,
                "conversation": (
                    ctx.conversation.model_dump(mode="json", exclude_none=True) if ctx.conversation else None
                ),
                "input": ctx.input.model_dump(mode="json", exclude_none=True),
            }
            if ctx.context.available_apis.event_get or ctx.resources.history.event_get:
                # The host's own record of the event (authorized and audited like any proxy call).
                record = await self.api.events.get(ctx.event.event_id)
                event["record"] = record.model_dump(mode="json", exclude_none=True)
            return event

        return await self._forward("langbot_current_event", answer)

    async def _history_page(
        self,
        before_cursor: str | None = None,
        after_cursor: str | None = None,
        limit: int = 20,
        direction: str = "backward",
    ) -> str:
        return await self._forward(
            "langbot_history_page",
            lambda: self.api.history.page(
                before_cursor=before_cursor, after_cursor=after_cursor, limit=limit, direction=direction
            ),
        )

    async def _history_search(self, query: str, top_k: int = 10) -> str:
        return await self._forward("langbot_history_search", lambda: self.api.history.search(query, top_k=top_k))

    async def _knowledge_retrieve(self, kb_id: str, query: str, top_k: int = 5) -> str:
        return await self._forward(
            "langbot_knowledge_retrieve", lambda: self.api.knowledge.retrieve(kb_id, query, top_k=top_k)
        )

    async def _list_tools(self) -> str:
        async def answer() -> list[Any]:
            return [
                tool.model_dump(mode="json", exclude_none=True)
                for tool in self.ctx.resources.tools
                if not tool.operations or "call" in tool.operations
            ]

        return await self._forward("langbot_list_tools", answer)

    async def _call_tool(self, tool_name: str, arguments: dict[str, Any] | None = None) -> str:
        return await self._forward("langbot_call_tool", lambda: self.api.tools.call(tool_name, arguments or {}))

    async def _event_get(self, event_id: str) -> str:
        return await self._forward("langbot_event_get", lambda: self.api.events.get(event_id))

    async def _event_page(self, before_cursor: str | None = None, limit: int = 20) -> str:
        return await self._forward(
            "langbot_event_page", lambda: self.api.events.page(before_cursor=before_cursor, limit=limit)
        )

    async def _artifact_metadata(self, artifact_id: str) -> str:
        return await self._forward("langbot_artifact_metadata", lambda: self.api.artifacts.metadata(artifact_id))

    async def _artifact_read(self, artifact_id: str, offset: int = 0, length: int = ARTIFACT_READ_MAX_BYTES) -> str:
        async def answer() -> dict[str, Any]:
            read = await self.api.artifacts.read_range(
                artifact_id, offset=max(0, offset), length=max(1, min(length, ARTIFACT_READ_MAX_BYTES))
            )
            data = read.data()
            answer: dict[str, Any] = {
                "artifact_id": read.artifact_id,
                "offset": read.offset,
                "length": read.length,
                "eof": read.eof,
                "total_size": read.total_size,
            }
            try:
                answer["text"] = data.decode("utf-8")
            except UnicodeDecodeError:
                answer["data_base64"] = read.data_base64
            return answer

        return await self._forward("langbot_artifact_read", answer)

    async def _state_get(self, scope: str, key: str) -> str:
        return await self._forward("langbot_state_get", lambda: self.api.state.get(scope, key))

    async def _state_list(self, scope: str, prefix: str | None = None) -> str:
        return await self._forward("langbot_state_list", lambda: self.api.state.list(scope, prefix=prefix))

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        import uvicorn
        from mcp.server.transport_security import TransportSecuritySettings

        mcp_server = self._build_server()
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{self.host}:*", "localhost:*"],
            allowed_origins=[f"http://{self.host}:*", "http://localhost:*"],
        )
        app = mcp_server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
            host=self.host,
        )
        # The session manager normally runs in the app's lifespan; uvicorn's lifespan handling may call
        # sys.exit on failure, which must never happen inside the plugin runtime, so it is run here.
        self._session_cm = mcp_server.session_manager.run()
        await self._session_cm.__aenter__()

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        config = uvicorn.Config(
            _BearerGuard(app, self.token),
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        server = _QuietServer(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[listener]), name=f"harness bridge {self.ctx.run_id}")
        try:
            async with asyncio.timeout(_STARTUP_TIMEOUT):
                while not server.started:
                    if self._task.done():
                        self._task.result()
                        raise RuntimeError("the host bridge stopped while starting")
                    await asyncio.sleep(0.01)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop listening and end every connection; the token is worthless afterwards."""
        server, task, session_cm = self._server, self._task, self._session_cm
        self._server = self._task = self._session_cm = None
        if server is not None:
            server.should_exit = True
            server.force_exit = True
        if task is not None:
            try:
                async with asyncio.timeout(5):
                    await asyncio.shield(task)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            except Exception:
                logger.warning("the host bridge of run %s failed while stopping", self.ctx.run_id, exc_info=True)
        if session_cm is not None:
            with contextlib.suppress(Exception):
                await session_cm.__aexit__(None, None, None)

    async def __aenter__(self) -> HostBridge:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def _quiet_server_class() -> type[uvicorn.Server]:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn without signal handling: the plugin runtime owns the process's signals."""

        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    return QuietServer


def _QuietServer(config: uvicorn.Config) -> uvicorn.Server:  # noqa: N802 - reads as a class
    return _quiet_server_class()(config)
