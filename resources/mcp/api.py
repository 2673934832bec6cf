"""REST endpoints for MCP servers and the tools runs may use (docs/architecture.md, "The REST API"):
`/api/v1/mcp-servers[/{server_id}]`, `/api/v1/mcp-servers/{server_id}/refresh`, `/api/v1/tools`.

Everything is scoped to the caller's workspace; another workspace's server answers 404. Bodies are parsed
by the strict models of `resources.mcp.specs`; a bad field (a stdio server without a command, an http
server without an http(s) url, an id already taken) answers 400 `invalid_argument` with `details.fields`.
`env` and `headers` values are never returned, only masked. A create, or a change of how an enabled server
connects, answers at once with `status: connecting` while a worker connects and lists the tools in the
background (`resources.mcp.services`); `status` then becomes `ok` with the tools, or `error` with
`last_error`. A refresh that cannot reach the server
answers 502 `mcp.unavailable`, one that gets no answer in time 504 `mcp.timeout`, a server that answers
with a protocol error 502 `mcp.refused` — each with the server's (redacted) words, recorded on the server
as `status: error` and `last_error`; refreshing a disabled server answers 409 `failed_precondition`.

Stdio servers are an operator's (`resources.mcp.policy`): a caller that is not an operator (an API key
with the operator scope, a staff session) making a server stdio or changing a stdio server's command,
args or env, or a command not on `LANGBOT_MCP_STDIO_COMMANDS`, answers 403 `mcp.stdio_not_allowed`. A
streamable-HTTP url whose address the outbound guard refuses answers 400 `address.not_allowed` with
`details.fields.url`. A stdio server's refresh runs in a worker: the answer waits for it (the server's
timeout plus a few seconds, at most a minute) and is the same as above, or 202 with the server as it
stands when the worker has not answered yet; its `status`, `last_error` and `tools_refreshed_at` show the
outcome later.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from pydantic import BaseModel, Field, RootModel
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.authentication import ApiKeyPrincipal
from bindings.models import Workspace
from foundation.api_errors import ApiError
from foundation.api_input import body_parse
from foundation.outbound import REFUSED_CODE as ADDRESS_REFUSED_CODE
from resources.mcp.policy import REFUSED_CODE as STDIO_REFUSED_CODE
from resources.mcp.policy import STDIO_SETTING, MCPStdioRefusedError
from resources.mcp.refresh import MCPServerDisabledError, MCPServerUnavailableError
from resources.mcp.selectors import mcp_server_get, mcp_server_list, mcp_server_tools, mcp_tool_list
from resources.mcp.services import (
    MCPRefreshPendingError,
    MCPServerAddressRefusedError,
    mcp_server_create,
    mcp_server_delete,
    mcp_server_input,
    mcp_server_refresh_requested,
    mcp_server_update,
)
from resources.mcp.specs import MCPServerIn, MCPServerPatchIn
from resources.models import MCPServer, MCPTool

_INVALID = OpenApiResponse(
    description="`invalid_argument` with details.fields; `address.not_allowed` for a url the outbound guard refuses"
)
_STDIO_REFUSED = OpenApiResponse(
    description="`mcp.stdio_not_allowed`: stdio servers are for operators, with an allowlisted command"
)
_REFRESH_FAILURES = {
    "unavailable": (502, "mcp.unavailable"),
    "timeout": (504, "mcp.timeout"),
    "refused": (502, "mcp.refused"),
}


# --- output shapes (documentation and serialization) -------------------------------------------------


class MCPServerToolOut(BaseModel):
    tool_name: str = Field(description="The public name: what `allowed_tool_names` and runners use.")
    remote_name: str = Field(description="The server's own name for the tool.")
    description: str
    parameters: dict[str, Any] = Field(description="JSON Schema of the arguments.")


class MCPServerOut(BaseModel):
    server_id: str
    name: str
    transport: str = Field(description="`stdio` or `streamable_http` (`http` is accepted as input).")
    command: str
    args: list[str]
    env: dict[str, str] = Field(description="Every value is shown as `********`.")
    url: str
    headers: dict[str, str] = Field(description="Every value is shown as `********`.")
    timeout_seconds: int
    enabled: bool
    status: str = Field(
        description="`connecting` (a worker is connecting after a create or a change of how the server "
        "connects), `ok`, `error`, or `unknown` (disabled before it connected)."
    )
    last_error: str
    tools_refreshed_at: datetime | None
    tools: list[MCPServerToolOut]
    created_at: datetime
    updated_at: datetime


class MCPServerListOut(BaseModel):
    items: list[MCPServerOut]


class ToolOut(BaseModel):
    tool_name: str
    description: str
    parameters: dict[str, Any]
    source: str = Field(description="`mcp:<server_id>`.")


class ToolListOut(RootModel[list[ToolOut]]):
    """The tools of the workspace's enabled servers, by name (a plain JSON array)."""


def mcp_server_out(server: MCPServer) -> dict[str, Any]:
    stored = mcp_server_input(server)
    return {
        "server_id": server.server_id,
        **stored,
        # Stored as `http`; answered with the name the REST contract pins.
        "transport": "streamable_http" if stored["transport"] == "http" else stored["transport"],
        "status": server.status,
        "last_error": server.last_error,
        "tools_refreshed_at": server.tools_refreshed_at.isoformat() if server.tools_refreshed_at else None,
        "tools": [
            {
                "tool_name": tool.tool_name,
                "remote_name": tool.remote_name,
                "description": tool.description,
                "parameters": tool.parameters,
            }
            for tool in mcp_server_tools(server)
        ],
        "created_at": server.created_at.isoformat(),
        "updated_at": server.updated_at.isoformat(),
    }


def tool_out(tool: MCPTool) -> dict[str, Any]:
    return {
        "tool_name": tool.tool_name,
        "description": tool.description,
        "parameters": tool.parameters,
        "source": f"mcp:{tool.server.server_id}",
    }


def _server_or_404(workspace: Workspace, server_id: str) -> MCPServer:
    server = mcp_server_get(workspace=workspace, server_id=server_id)
    if server is None:
        raise ApiError(404, "not_found", f"No MCP server {server_id!r} in this workspace.")
    return server


def _reloaded(workspace: Workspace, server: MCPServer) -> MCPServer:
    # With its tools as stored now (a refresh or a save changed them).
    return _server_or_404(workspace, server.server_id)


def _is_operator(request: Request) -> bool:
    # As `bindings.access.require_operator` decides: an operator-scoped key, or a staff member's session.
    user = request.user
    if isinstance(user, ApiKeyPrincipal):
        return user.api_key.is_operator
    return bool(user is not None and user.is_active and user.is_staff)


def _stdio_refused(exc: MCPStdioRefusedError) -> ApiError:
    details: dict[str, Any] = {"setting": STDIO_SETTING}
    if exc.reason == "operator":
        details["required_scope"] = "operator"
    return ApiError(403, STDIO_REFUSED_CODE, exc.message, details)


def _address_refused(exc: MCPServerAddressRefusedError) -> ApiError:
    return ApiError(400, ADDRESS_REFUSED_CODE, exc.fields["url"], {"fields": exc.fields})


# --- views -------------------------------------------------------------------------------------------


class MCPServerListApi(APIView):
    required_scopes = {"GET": "resources:read", "POST": "resources:write"}

    @extend_schema(operation_id="mcp_servers_list", parameters=[WORKSPACE_PARAMETER], responses=MCPServerListOut)
    def get(self, request: Request) -> Response:
        servers = mcp_server_list(workspace=request_workspace(request))
        return Response({"items": [mcp_server_out(s) for s in servers]})

    @extend_schema(
        operation_id="mcp_servers_create",
        parameters=[WORKSPACE_PARAMETER],
        request=MCPServerIn,
        responses={201: MCPServerOut, 400: _INVALID, 403: _STDIO_REFUSED},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(MCPServerIn, request.data)
        try:
            server = mcp_server_create(workspace=workspace, spec=spec, operator=_is_operator(request))
        except MCPStdioRefusedError as exc:
            raise _stdio_refused(exc) from None
        except MCPServerAddressRefusedError as exc:
            raise _address_refused(exc) from None
        return Response(mcp_server_out(_reloaded(workspace, server)), status=status.HTTP_201_CREATED)


class MCPServerDetailApi(APIView):
    required_scopes = {"GET": "resources:read", "PATCH": "resources:write", "DELETE": "resources:write"}

    @extend_schema(operation_id="mcp_servers_retrieve", parameters=[WORKSPACE_PARAMETER], responses=MCPServerOut)
    def get(self, request: Request, server_id: str) -> Response:
        return Response(mcp_server_out(_server_or_404(request_workspace(request), server_id)))

    @extend_schema(
        operation_id="mcp_servers_update",
        parameters=[WORKSPACE_PARAMETER],
        request=MCPServerPatchIn,
        responses={200: MCPServerOut, 400: _INVALID, 403: _STDIO_REFUSED},
    )
    def patch(self, request: Request, server_id: str) -> Response:
        workspace = request_workspace(request)
        server = _server_or_404(workspace, server_id)
        patch = body_parse(MCPServerPatchIn, request.data)
        try:
            server = mcp_server_update(server=server, patch=patch, operator=_is_operator(request))
        except MCPStdioRefusedError as exc:
            raise _stdio_refused(exc) from None
        except MCPServerAddressRefusedError as exc:
            raise _address_refused(exc) from None
        return Response(mcp_server_out(_reloaded(workspace, server)))

    @extend_schema(operation_id="mcp_servers_destroy", parameters=[WORKSPACE_PARAMETER], responses={204: None})
    def delete(self, request: Request, server_id: str) -> Response:
        mcp_server_delete(server=_server_or_404(request_workspace(request), server_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class MCPServerRefreshApi(APIView):
    required_scopes = {"POST": "resources:write"}

    @extend_schema(
        operation_id="mcp_servers_refresh",
        parameters=[WORKSPACE_PARAMETER],
        request=None,
        responses={
            200: MCPServerOut,
            202: OpenApiResponse(
                MCPServerOut, description="stdio: a worker is still refreshing; the server as it stands"
            ),
            403: _STDIO_REFUSED,
            409: OpenApiResponse(description="`failed_precondition`: the server is disabled"),
            502: OpenApiResponse(description="`mcp.unavailable` or `mcp.refused`, with the server's error"),
            504: OpenApiResponse(description="`mcp.timeout`: no answer within the server's timeout"),
        },
    )
    def post(self, request: Request, server_id: str) -> Response:
        workspace = request_workspace(request)
        server = _server_or_404(workspace, server_id)
        try:
            mcp_server_refresh_requested(server=server)
        except MCPRefreshPendingError:
            return Response(mcp_server_out(_reloaded(workspace, server)), status=status.HTTP_202_ACCEPTED)
        except MCPStdioRefusedError as exc:
            raise _stdio_refused(exc) from None
        except MCPServerDisabledError as exc:
            raise ApiError(409, "failed_precondition", "The server is disabled.", {"fields": exc.fields}) from None
        except MCPServerUnavailableError as exc:
            status_code, code = _REFRESH_FAILURES.get(exc.kind, (502, "mcp.unavailable"))
            details = {"server_id": server.server_id, "status": MCPServer.Status.ERROR.value}
            raise ApiError(status_code, code, f"MCP server {server.server_id!r}: {exc.message}", details) from None
        return Response(mcp_server_out(_reloaded(workspace, server)))


class ToolListApi(APIView):
    required_scopes = {"GET": "resources:read"}

    @extend_schema(operation_id="tools_list", parameters=[WORKSPACE_PARAMETER], responses=ToolListOut)
    def get(self, request: Request) -> Response:
        tools = mcp_tool_list(workspace=request_workspace(request))
        return Response([tool_out(tool) for tool in tools])
