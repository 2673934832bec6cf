"""A server's tools, fetched and stored: `mcp_server_refresh` lists them (connecting if needed, within the
server's timeout), stores them under public names and records how the connection went on the server;
`mcp_server_connect_run` and `mcp_server_refresh_run` are a worker's side of a save's connect and of a
refresh asked from the web (`resources.tasks` runs them; `resources.mcp.services` sends those tasks, so
nothing here imports the services).

Tool names. A server's tools are cached as `MCPTool` rows whose `tool_name` is the public name bindings
allow and runners call; it matches `^[a-zA-Z0-9_-]{1,64}$` (what OpenAI-style function calling accepts):
other characters of the server's own name become `_`, and it is cut to 64. Names are unique per
workspace, and collisions between servers resolve first come, first served:
- a tool keeps its (sanitized) own name when no other tool of the workspace has that name;
- a tool whose name another server's tool already has becomes `<server_id>__<name>` (and, in the unlikely
  case that is taken too, `<server_id>__<name>_2`, `_3`, ...);
- a name once assigned stays on every refresh while the server still lists the tool, even after the tool
  it collided with is gone, so a binding's `allowed_tool_names` never silently points at another tool;
- a tool the server no longer lists is deleted, freeing its name.
Every connection attempt records the server's `status` and `last_error` without touching `updated_at`
(which keys the live sessions: an edit, not a status, makes a new one).
"""

from __future__ import annotations

import contextlib
import re
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from foundation.api_errors import FieldsRefusedError
from resources.mcp.client import MCPClientError, MCPServerConfig, RemoteTool, mcp_tools_list
from resources.models import MCPServer, MCPTool

TOOL_NAME_MAX = 64
REMOTE_NAME_MAX = MCPTool._meta.get_field("remote_name").max_length or 128
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
# What a listing may bring in, per server and per tool; more is refused as a failed refresh.
MAX_TOOLS_PER_SERVER = 500
DESCRIPTION_MAX_CHARS = 8192
# How long a worker's outcome of a refresh asked from the web stays in the cache for the web to read.
REFRESH_OUTCOME_SECONDS = 300


class MCPServerDisabledError(FieldsRefusedError):
    """The server is disabled; it is neither connected to nor refreshed."""


class MCPServerUnavailableError(Exception):
    """A refresh that could not reach the server or got no answer in time; `kind` is the client's
    (`unavailable`, `timeout`, `refused`), the message redacted."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def mcp_server_status_set(server: MCPServer, **values: Any) -> None:
    # A queryset update: `updated_at` (the sessions' key, and the connect task's fence) stays the save's.
    MCPServer.objects.filter(pk=server.pk).update(**values)
    for name, value in values.items():
        setattr(server, name, value)


def mcp_server_status_record(*, server: MCPServer, error: str | None, tools_refreshed: bool = False) -> None:
    """Record how the last connection went. A queryset update: `updated_at` keys the live sessions and
    must only change when the server's settings do."""
    values: dict[str, Any] = {
        "status": MCPServer.Status.ERROR if error else MCPServer.Status.OK,
        "last_error": (error or "")[:4000],
    }
    if tools_refreshed:
        values["tools_refreshed_at"] = timezone.now()
    mcp_server_status_set(server, **values)


def mcp_server_refresh(*, server: MCPServer) -> MCPServer:
    """Ask the server for its tools now (connecting if needed, within its timeout), store them and record
    the outcome. A failure is recorded on the server and raised as `MCPServerUnavailableError`; the tools
    cached before stay as they were."""
    if not server.enabled:
        raise MCPServerDisabledError({"enabled": "The server is disabled; enable it to refresh its tools."})
    config = MCPServerConfig.of(server)
    try:
        tools = mcp_tools_list(config)
    except MCPClientError as exc:
        mcp_server_status_record(server=server, error=exc.message)
        raise MCPServerUnavailableError(exc.kind, exc.message) from None
    return mcp_server_connected(server=server, tools=tools)


def refresh_outcome_key(token: str) -> str:
    return f"langbot:mcp:refresh:{token}"


def mcp_server_connect_run(*, server_pk: int, version: str) -> None:
    """A worker's side of `mcp_server_saved`: connect the server as saved at `version` (its `updated_at`)
    and list its tools, the outcome recorded on the server as any refresh's is. A server deleted, or saved
    again since (that save sent a worker of its own), is left alone. Running it twice lists the tools
    twice, which is harmless."""
    server = MCPServer.objects.select_related("workspace").filter(pk=server_pk).first()
    if server is None or server.updated_at != datetime.fromisoformat(version) or not server.enabled:
        return
    # A failure is recorded on the server (`status: error`, `last_error`): that is where the user looks.
    with contextlib.suppress(MCPServerUnavailableError):
        mcp_server_refresh(server=server)


def mcp_server_refresh_run(*, server_pk: int, token: str) -> None:
    """A worker's side of `mcp_server_refresh_queued`: refresh the server and leave the outcome in the
    cache under `token`. Running it twice refreshes twice, which is harmless."""
    server = MCPServer.objects.select_related("workspace").filter(pk=server_pk).first()
    outcome: dict[str, Any]
    if server is None:
        outcome = {"gone": True}
    else:
        try:
            mcp_server_refresh(server=server)
            outcome = {"ok": True}
        except MCPServerDisabledError:
            outcome = {"disabled": True}
        except MCPServerUnavailableError as exc:
            outcome = {"kind": exc.kind, "message": exc.message}
    cache.set(refresh_outcome_key(token), outcome, REFRESH_OUTCOME_SECONDS)


def mcp_server_connected(*, server: MCPServer, tools: list[RemoteTool]) -> MCPServer:
    """A fresh listing of the server's tools: store it and mark the server ok (a listing too large to keep
    marks it failing instead)."""
    if len(tools) > MAX_TOOLS_PER_SERVER:
        message = f"the server lists {len(tools)} tools; at most {MAX_TOOLS_PER_SERVER} are kept"
        mcp_server_status_record(server=server, error=message)
        raise MCPServerUnavailableError("refused", message)
    mcp_tools_store(server=server, tools=tools)
    mcp_server_status_record(server=server, error=None, tools_refreshed=True)
    return server


# --- tools -------------------------------------------------------------------------------------------


def mcp_tool_name_sanitized(name: str) -> str:
    """A server's tool name as a public name: characters outside `[a-zA-Z0-9_-]` become `_`, at most 64."""
    return _UNSAFE.sub("_", name)[:TOOL_NAME_MAX] or "tool"


def _name_free(base: str, *, server_id: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    prefixed = f"{server_id}__{base}"[:TOOL_NAME_MAX]
    candidate, number = prefixed, 2
    while candidate in taken:
        suffix = f"_{number}"
        candidate = prefixed[: TOOL_NAME_MAX - len(suffix)] + suffix
        number += 1
    return candidate


def mcp_tools_store(*, server: MCPServer, tools: list[RemoteTool]) -> list[MCPTool]:
    """Replace the server's cached tools by a listing, naming new ones by the rule of the module
    docstring. Two servers of a workspace stored at once may race for a name: the unique constraint
    refuses the loser, which tries again and sees the winner's names."""
    for attempt in range(3):
        try:
            with transaction.atomic():
                return _tools_store(server, tools)
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _tools_store(server: MCPServer, tools: list[RemoteTool]) -> list[MCPTool]:
    listed: dict[str, RemoteTool] = {}
    for tool in tools:
        # A name the row cannot hold could not be called back either; a name listed twice: the first counts.
        if len(tool.name) <= REMOTE_NAME_MAX:
            listed.setdefault(tool.name, tool)
    existing = {row.remote_name: row for row in MCPTool.objects.select_for_update().filter(server=server)}
    gone = [row.pk for name, row in existing.items() if name not in listed]
    if gone:
        MCPTool.objects.filter(pk__in=gone).delete()
    taken = set(
        MCPTool.objects.filter(workspace_id=server.workspace_id)
        .exclude(server=server)
        .values_list("tool_name", flat=True)
    )
    # Names already assigned first, so a new tool never takes the name a kept one has.
    taken |= {row.tool_name for name, row in existing.items() if name in listed}
    rows: list[MCPTool] = []
    for position, (remote_name, tool) in enumerate(listed.items()):
        row = existing.get(remote_name)
        if row is None:
            name = _name_free(mcp_tool_name_sanitized(remote_name), server_id=server.server_id, taken=taken)
            taken.add(name)
            row = MCPTool(workspace_id=server.workspace_id, server=server, tool_name=name, remote_name=remote_name)
        row.description = tool.description[:DESCRIPTION_MAX_CHARS]
        row.parameters = tool.parameters if isinstance(tool.parameters, dict) else {}
        row.position = position
        rows.append(row)
    MCPTool.objects.bulk_update([r for r in rows if r.pk], ["description", "parameters", "position"])
    MCPTool.objects.bulk_create([r for r in rows if not r.pk])
    return rows
