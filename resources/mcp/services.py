"""Writes for MCP servers and their cached tools, shared by the REST API, the admin and the tool handler.

Secrets: a server's `env` and `headers` values are write-only. A value sent back as the mask
(`SECRET_MASK`) keeps the stored one; a name left out is removed.

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
Refreshing happens on demand (REST, admin), whenever a session (re)connects, and in the background after
a save that changes how the server connects; every connection attempt records the server's `status` and
`last_error`, without touching `updated_at` (which keys the live sessions: an edit, not a status, makes a
new one).

Connecting after a save. Creating an enabled server, enabling one, or changing what it connects with
(`transport`, `command`, `args`, `env`, `url`, `headers`) marks it `connecting` (its old `last_error` is
about settings that are gone) and, once the transaction commits, sends a worker to connect and list its
tools (`mcp_server_connect_run`); the save answers at once. A rename, a new timeout or disabling does not
connect; a server disabled while it was connecting goes back to `unknown`. The status stays `connecting`
until a worker has answered: with no worker running it stays so, and a refresh still works.

Who may save what: stdio servers follow `resources.mcp.policy` (an operator's, with an allowlisted
command); a streamable-HTTP server's URL must pass the outbound guard when saved (public addresses only,
unless the workspace may reach private ones), and again on every connection (`foundation.outbound`).

Where a stdio server runs: never in the web process. A refresh asked from the web (REST, admin) of a stdio
server is sent to a worker (`mcp_server_refresh_queued`), which holds the MCP sessions runs use anyway; the
web waits a bounded time for the worker's outcome, passed back through the cache.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import ValidationError

from bindings.models import Workspace
from bindings.selectors import workspace_private_addresses_allowed
from foundation.api_errors import FieldsRefusedError, field_errors
from foundation.crypto import SECRET_MASK
from foundation.ids import free_slug
from foundation.outbound import url_refusal
from resources.mcp.client import MCPClientError, MCPServerConfig, RemoteTool, mcp_connection_close, mcp_tools_list
from resources.mcp.policy import MCPStdioRefusedError, mcp_stdio_change_check, mcp_stdio_command_refusal
from resources.mcp.specs import MCPServerIn, MCPServerPatchIn, mcp_url_checked
from resources.models import MCPServer, MCPTool
from resources.services import ResourceValidationError

TOOL_NAME_MAX = 64
REMOTE_NAME_MAX = MCPTool._meta.get_field("remote_name").max_length or 128
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_STDIO_FIELDS = ("command", "args", "env")
_HTTP_FIELDS = ("url", "headers")
# What a server connects with: a save that changes one of these connects it anew.
_CONNECTION_FIELDS = ("transport", *_STDIO_FIELDS, *_HTTP_FIELDS)
# What a listing may bring in, per server and per tool; more is refused as a failed refresh.
MAX_TOOLS_PER_SERVER = 500
DESCRIPTION_MAX_CHARS = 8192
# A refresh sent to a worker: the web waits the server's own timeout plus this, at most REFRESH_WAIT_MAX
# seconds (a request thread is held meanwhile), then answers that the refresh goes on. The worker's
# outcome stays in the cache for REFRESH_OUTCOME_SECONDS.
REFRESH_WAIT_GRACE = 5.0
REFRESH_WAIT_MAX = 60.0
REFRESH_POLL_SECONDS = 0.1
REFRESH_OUTCOME_SECONDS = 300


class MCPServerDisabledError(FieldsRefusedError):
    """The server is disabled; it is neither connected to nor refreshed."""


class MCPServerAddressRefusedError(FieldsRefusedError):
    """A streamable-HTTP URL the outbound guard refuses (`fields["url"]` says why and what would allow it)."""


class MCPRefreshPendingError(Exception):
    """A refresh sent to a worker that has not answered within the wait; it goes on, and the server's
    `status`, `last_error` and `tools_refreshed_at` will show its outcome."""


class MCPServerUnavailableError(Exception):
    """A refresh that could not reach the server or got no answer in time; `kind` is the client's
    (`unavailable`, `timeout`, `refused`), the message redacted."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# --- servers -----------------------------------------------------------------------------------------


def mcp_secret_merge(
    *, env: dict[str, str], headers: dict[str, str], server: MCPServer | None
) -> tuple[dict[str, str], dict[str, str]]:
    """`env` and `headers` as given, masked values replaced by the stored ones; a mask with nothing
    stored is an error."""
    merged: list[dict[str, str]] = []
    for field, given in (("env", env), ("headers", headers)):
        stored: dict[str, str] = (getattr(server, field) or {}) if server is not None else {}
        values: dict[str, str] = {}
        for name, value in given.items():
            if value == SECRET_MASK:
                if name not in stored:
                    raise ResourceValidationError(
                        {f"{field}.{name}": "There is no stored value to keep; send the value."}
                    )
                values[name] = stored[name]
            else:
                values[name] = value
        merged.append(values)
    return merged[0], merged[1]


def mcp_transport_check(spec: MCPServerIn, *, allow_private: bool) -> MCPServerIn:
    """The cross-field rules of a server's transport, each reported on its field: stdio needs a command,
    http an http(s) url without credentials, and neither takes the other's fields. Then the outbound
    guard's check of the url's addresses (`MCPServerAddressRefusedError`), unless `allow_private`."""
    errors: dict[str, str] = {}
    url = spec.url
    if spec.transport == "stdio":
        if not spec.command.strip():
            errors["command"] = "A stdio server needs a command."
        errors |= {name: "Only for http servers." for name in _HTTP_FIELDS if getattr(spec, name)}
    else:
        if not spec.url.strip():
            errors["url"] = "An http server needs a url."
        else:
            try:
                url = mcp_url_checked(spec.url)
            except ValueError as exc:
                errors["url"] = str(exc)
            else:
                # The form of the URL first (a field error), its addresses after (the guard's refusal).
                if (refusal := url_refusal(url, allow_private=True)) is not None:
                    errors["url"] = refusal
        errors |= {name: "Only for stdio servers." for name in _STDIO_FIELDS if getattr(spec, name)}
    if errors:
        raise ResourceValidationError(errors)
    if spec.transport != "stdio" and not allow_private and (refusal := url_refusal(url, allow_private=False)):
        raise MCPServerAddressRefusedError({"url": refusal})
    return spec.model_copy(update={"command": spec.command.strip(), "url": url})


def _server_apply(server: MCPServer, spec: MCPServerIn, *, operator: bool) -> MCPServer:
    stored = server if server.pk else None
    spec = mcp_transport_check(spec, allow_private=workspace_private_addresses_allowed(workspace=server.workspace))
    env, headers = mcp_secret_merge(env=spec.env, headers=spec.headers, server=stored)
    if spec.transport == "stdio":
        mcp_stdio_change_check(command=spec.command, args=spec.args, env=env, stored=stored, operator=operator)
    # Read before the fields below are assigned: `stored` is the same object.
    connection_before = mcp_server_connection(stored) if stored is not None else None
    server.name = spec.name
    server.transport = spec.transport
    server.command = spec.command
    server.args = list(spec.args)
    server.env = env
    server.url = spec.url
    server.headers = headers
    server.timeout_seconds = spec.timeout_seconds
    server.enabled = spec.enabled
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError as exc:
        raise ResourceValidationError({"server_id": f"{server.server_id!r} already exists in this workspace."}) from exc
    # This process's session of the old settings goes now; other processes' sessions are keyed by
    # `updated_at` and replaced on their next use (or reaped when idle).
    pk = server.pk
    transaction.on_commit(lambda: mcp_connection_close(pk))
    mcp_server_saved(server=server, connection_before=connection_before)
    return server


def mcp_server_connection(server: MCPServer) -> tuple[Any, ...] | None:
    """What the server connects with, or None when it is disabled (it does not connect): two saves that
    give different values connect differently."""
    if not server.enabled:
        return None
    return tuple(getattr(server, name) for name in _CONNECTION_FIELDS)


def mcp_server_saved(*, server: MCPServer, connection_before: tuple[Any, ...] | None) -> None:
    """After a save (REST, admin) of a server that connected with `connection_before` (None: it was new or
    disabled): when it now connects differently, mark it `connecting` and send a worker to connect once the
    transaction commits; when it is disabled, a `connecting` it still shows is over."""
    from resources.tasks import mcp_server_connect  # the tasks module imports this one

    connection = mcp_server_connection(server)
    if connection is None:
        if server.status == MCPServer.Status.CONNECTING:
            _status_set(server, status=MCPServer.Status.UNKNOWN, last_error="")
        return
    if connection == connection_before:
        return
    _status_set(server, status=MCPServer.Status.CONNECTING, last_error="")
    pk, version = server.pk, server.updated_at.isoformat()
    transaction.on_commit(lambda: mcp_server_connect.delay(pk, version))


def _status_set(server: MCPServer, **values: Any) -> None:
    # A queryset update: `updated_at` (the sessions' key, and the connect task's fence) stays the save's.
    MCPServer.objects.filter(pk=server.pk).update(**values)
    for name, value in values.items():
        setattr(server, name, value)


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


@transaction.atomic
def mcp_server_create(*, workspace: Workspace, spec: MCPServerIn, operator: bool = False) -> MCPServer:
    """Create a server. `operator`: the caller is an operator (an operator key, staff), who alone may set
    up a stdio server (`resources.mcp.policy`)."""

    def taken(server_id: str) -> bool:
        return MCPServer.objects.filter(workspace=workspace, server_id=server_id).exists()

    if spec.server_id is not None and taken(spec.server_id):
        raise ResourceValidationError({"server_id": f"{spec.server_id!r} already exists in this workspace."})
    server_id = spec.server_id or free_slug(base=spec.name, taken=taken, fallback="mcp")
    return _server_apply(MCPServer(workspace=workspace, server_id=server_id), spec, operator=operator)


def mcp_server_input(server: MCPServer) -> dict[str, Any]:
    """A stored server as the input that would create it (without its id), secrets masked: what a PATCH
    merges into, and what answers show."""
    return {
        "name": server.name,
        "transport": server.transport,
        "command": server.command,
        "args": list(server.args or []),
        "env": dict.fromkeys(server.env or {}, SECRET_MASK),
        "url": server.url,
        "headers": dict.fromkeys(server.headers or {}, SECRET_MASK),
        "timeout_seconds": server.timeout_seconds,
        "enabled": server.enabled,
    }


@transaction.atomic
def mcp_server_update(*, server: MCPServer, patch: MCPServerPatchIn, operator: bool = False) -> MCPServer:
    """Apply a PATCH: given keys replace stored ones (`env`, `headers`, `args` as a whole); the result
    is validated as a whole server. A new transport starts without the old one's fields. Only an
    `operator` may make the server stdio or change a stdio server's command, args or env."""
    nulls = {name: "May not be null." for name in patch.model_fields_set if getattr(patch, name) is None}
    if nulls:
        raise ResourceValidationError(nulls)
    if patch.server_id is not None and patch.server_id != server.server_id:
        raise ResourceValidationError({"server_id": "A server's id cannot be changed."})
    stored = mcp_server_input(server)
    given = patch.model_dump(mode="json", include=patch.model_fields_set - {"server_id"})
    transport = "http" if given.get("transport") == "streamable_http" else given.get("transport")
    if transport is not None and transport != server.transport:
        old = _STDIO_FIELDS if server.transport == "stdio" else _HTTP_FIELDS
        for name in old:
            stored.pop(name, None)
    try:
        spec = MCPServerIn.model_validate({**stored, **given})
    except ValidationError as exc:
        raise ResourceValidationError(field_errors(exc)) from None
    return _server_apply(server, spec, operator=operator)


def mcp_server_delete(*, server: MCPServer) -> None:
    """Delete a server and its tools; runs that were allowed its tools get `not_found` from now on."""
    pk = server.pk
    server.delete()
    transaction.on_commit(lambda: mcp_connection_close(pk))


def mcp_server_status_record(*, server: MCPServer, error: str | None, tools_refreshed: bool = False) -> None:
    """Record how the last connection went. A queryset update: `updated_at` keys the live sessions and
    must only change when the server's settings do."""
    values: dict[str, Any] = {
        "status": MCPServer.Status.ERROR if error else MCPServer.Status.OK,
        "last_error": (error or "")[:4000],
    }
    if tools_refreshed:
        values["tools_refreshed_at"] = timezone.now()
    _status_set(server, **values)


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


def _refresh_outcome_key(token: str) -> str:
    return f"langbot:mcp:refresh:{token}"


def mcp_server_refresh_queued(*, server: MCPServer) -> MCPServer:
    """Refresh a server in a worker (a stdio server never starts in the web process) and wait a bounded
    time for the outcome: the server refreshed, or the worker's `MCPServerUnavailableError` /
    `MCPServerDisabledError` / `MCPStdioRefusedError`, or `MCPRefreshPendingError` when the worker has not
    answered in time. A command no longer allowed is refused here already, and recorded on the server."""
    from resources.tasks import mcp_server_refresh as refresh_task  # the tasks module imports this one

    if not server.enabled:
        raise MCPServerDisabledError({"enabled": "The server is disabled; enable it to refresh its tools."})
    if server.transport == MCPServer.Transport.STDIO and (refusal := mcp_stdio_command_refusal(server.command)):
        mcp_server_status_record(server=server, error=f"not started: {refusal}")
        raise MCPStdioRefusedError(refusal[0].upper() + refusal[1:], reason="command")
    token = secrets.token_urlsafe(16)
    # Sent at once rather than on commit: the row is already stored, and nothing here is written first.
    refresh_task.delay(server.pk, token)
    deadline = time.monotonic() + min(server.timeout_seconds + REFRESH_WAIT_GRACE, REFRESH_WAIT_MAX)
    while (outcome := cache.get(_refresh_outcome_key(token))) is None:
        if time.monotonic() >= deadline:
            raise MCPRefreshPendingError(f"a worker is refreshing MCP server {server.server_id!r}")
        time.sleep(REFRESH_POLL_SECONDS)
    server.refresh_from_db()
    if outcome.get("disabled"):
        raise MCPServerDisabledError({"enabled": "The server is disabled; enable it to refresh its tools."})
    if outcome.get("gone"):
        raise MCPServerUnavailableError("unavailable", "the server was deleted meanwhile")
    if outcome.get("kind"):
        raise MCPServerUnavailableError(str(outcome["kind"]), str(outcome.get("message") or ""))
    return server


def mcp_server_refresh_requested(*, server: MCPServer) -> MCPServer:
    """A refresh asked from the web process (REST, admin): a stdio server's runs in a worker
    (`mcp_server_refresh_queued`), a streamable-HTTP server's here, through the outbound guard."""
    if server.transport == MCPServer.Transport.STDIO:
        return mcp_server_refresh_queued(server=server)
    return mcp_server_refresh(server=server)


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
    cache.set(_refresh_outcome_key(token), outcome, REFRESH_OUTCOME_SECONDS)


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
