"""`get_tool_detail` and `call_tool` against the workspace's MCP servers (docs/host-apis.md, "Tools"). The caller
(`providers.tool_call`) has already checked the run's snapshot.

A tool is read from the workspace when called: one whose server was deleted or disabled since the run
started answers `not_found`. `call_tool`:
- the arguments are validated against the tool's JSON schema first; a mismatch is `invalid_argument`
  naming where (`$.a`) and why, and the server is not called;
- the call gets min(the server's timeout, what the run has left), connecting included; no answer in time
  is `deadline_exceeded`; a server that cannot be reached or whose connection broke (after one reconnect)
  is a retryable `runtime_error` (`details.reason: unavailable`); a protocol error the server answers
  with is `invalid_argument` for bad params, else a non-retryable `runtime_error` with its words;
- a tool that reports an error (MCP `isError`) is not a failed call: `CallToolResult(is_error=True,
  result=<its text>)`, so the model can read it and correct itself;
- a result is the text of its content. Up to `TOOL_RESULT_INLINE_MAX_CHARS` it is returned as a string;
  past that the whole text is stored as an artifact of the run's conversation and the result is
  `{"preview", "artifact_id", "size" (bytes), "truncated": true}` — the runner reads the rest through
  the artifacts API if it needs it;
- a call that had to (re)connect refreshes the server's cached tools and status from that connection.
Messages never carry the server's env or header values (the client redacts them).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Workspace
from hostapi.base import HandlerResult, ProxyCall, not_found
from langbot_sdk.authorization import tool_arguments_check
from langbot_sdk.protocol import Action, AgentAPIException, CallToolResult, ToolDetail
from resources.mcp.client import MCPClientError, MCPServerConfig, RemoteTool, mcp_tool_call
from resources.mcp.refresh import MCPServerUnavailableError, mcp_server_connected, mcp_server_status_record
from resources.mcp.selectors import mcp_tool_for_call
from resources.models import MCPServer, MCPTool

logger = logging.getLogger(__name__)

# A result longer than this is stored as an artifact and returned as a preview plus a reference: 32 KiB of
# text is several thousand tokens already, more than a model should be handed unasked.
TOOL_RESULT_INLINE_MAX_CHARS = 32 * 1024
TOOL_RESULT_PREVIEW_CHARS = 4 * 1024
# The most of one result kept as an artifact (the artifacts API reads up to 10 MiB a range).
TOOL_RESULT_ARTIFACT_MAX_BYTES = 10 * 1024 * 1024
# An error text is returned inline, cut to this.
TOOL_ERROR_MAX_CHARS = 8 * 1024


async def tool_handle(call: ProxyCall) -> HandlerResult:
    tool_name = call.request.tool_name
    tool = await call.db(mcp_tool_for_call, workspace_id=call.session.scope.workspace_id, tool_name=tool_name)
    if tool is None:
        raise not_found(f"tool {tool_name!r} is not configured on this host", tool_name=tool_name)
    if call.action is Action.GET_TOOL_DETAIL:
        detail = ToolDetail(tool_name=tool.tool_name, description=tool.description or None, parameters=tool.parameters)
        return detail.model_dump(mode="json")
    arguments: dict[str, Any] = call.request.parameters
    _arguments_check(tool, arguments)
    timeout = min(float(tool.server.timeout_seconds), call.remaining())
    if timeout <= 0:
        raise AgentAPIException.deadline_exceeded("the run has no time left for a tool call", tool_name=tool_name)
    config = MCPServerConfig.of(tool.server)
    try:
        answer = await mcp_tool_call(config, name=tool.remote_name, arguments=arguments, timeout=timeout)
    except MCPClientError as exc:
        if exc.connecting or exc.kind == "unavailable":
            await call.db(mcp_server_status_record, server=tool.server, error=exc.message)
        raise _call_failed(tool, exc, timeout=timeout) from None
    if answer.listed_tools is not None:
        await call.db(_connected, server=tool.server, tools=answer.listed_tools)
    if answer.is_error:
        text = answer.text if len(answer.text) <= TOOL_ERROR_MAX_CHARS else answer.text[:TOOL_ERROR_MAX_CHARS] + "…"
        return CallToolResult(result=text, is_error=True).model_dump(mode="json")
    if len(answer.text) <= TOOL_RESULT_INLINE_MAX_CHARS:
        return CallToolResult(result=answer.text).model_dump(mode="json")
    artifact = await call.db(
        _result_store,
        workspace_id=call.session.scope.workspace_id,
        conversation_id=call.session.scope.conversation_id or "",
        run_id=call.session.run_id,
        tool_name=tool.tool_name,
        text=answer.text,
    )
    reference = {
        "preview": answer.text[:TOOL_RESULT_PREVIEW_CHARS],
        "artifact_id": str(artifact.artifact_id),
        "size": artifact.size,
        "truncated": True,
    }
    return CallToolResult(result=reference).model_dump(mode="json")


def _arguments_check(tool: MCPTool, arguments: dict[str, Any]) -> None:
    tool_arguments_check(tool.tool_name, tool.parameters or {}, arguments)


def _call_failed(tool: MCPTool, exc: MCPClientError, *, timeout: float) -> AgentAPIException:
    server_id = tool.server.server_id
    details: dict[str, Any] = {"tool_name": tool.tool_name, "server_id": server_id}
    if exc.kind == "timeout":
        return AgentAPIException.deadline_exceeded(
            f"MCP server {server_id!r} did not answer the call of {tool.tool_name!r} within {timeout:.3g} s", **details
        )
    if exc.kind == "unavailable":
        return AgentAPIException.runtime_error(
            f"MCP server {server_id!r} is unavailable: {exc.message}", retryable=True, reason="unavailable", **details
        )
    # -32602, JSON-RPC's "invalid params": the server refused the arguments themselves.
    if exc.code == -32602:
        return AgentAPIException.invalid_argument(
            f"MCP server {server_id!r} refused the arguments: {exc.message}", **details
        )
    return AgentAPIException.runtime_error(
        f"MCP server {server_id!r} answered with an error: {exc.message}", retryable=False, code=exc.code, **details
    )


def _connected(*, server: MCPServer, tools: list[RemoteTool]) -> None:
    # A listing too large to keep is recorded on the server; the call itself succeeded.
    with contextlib.suppress(MCPServerUnavailableError):
        mcp_server_connected(server=server, tools=tools)


def _result_store(*, workspace_id: int, conversation_id: str, run_id: str, tool_name: str, text: str) -> Artifact:
    data = text.encode("utf-8")[:TOOL_RESULT_ARTIFACT_MAX_BYTES]
    return artifact_create_from_bytes(
        workspace=Workspace.objects.get(pk=workspace_id),
        data=data,
        name=f"{tool_name}-result.txt",
        mime_type="text/plain",
        conversation_id=conversation_id,
        source=Artifact.Source.RUNNER,
        run_id=run_id,
    )
