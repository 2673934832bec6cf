"""Writes for MCP servers, shared by the REST API, the admin and the tool handler.

Secrets: a server's `env` and `headers` values are write-only. A value sent back as the mask
(`SECRET_MASK`) keeps the stored one; a name left out is removed.

Refreshing happens on demand (REST, admin), whenever a session (re)connects, and in the background after
a save that changes how the server connects. Listing, storing and naming the tools and recording each
connection's outcome are `resources.mcp.refresh`'s, which the worker's tasks call without these services.

Connecting after a save. Creating an enabled server, enabling one, or changing what it connects with
(`transport`, `command`, `args`, `env`, `url`, `headers`) marks it `connecting` (its old `last_error` is
about settings that are gone) and, once the transaction commits, sends a worker to connect and list its
tools (`refresh.mcp_server_connect_run`); the save answers at once. A rename, a new timeout or disabling does not
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

import secrets
import time
from typing import Any

from django.core.cache import cache
from django.db import IntegrityError, transaction
from pydantic import ValidationError

from bindings.models import Workspace
from bindings.selectors import workspace_private_addresses_allowed
from foundation.api_errors import FieldsRefusedError, field_errors
from foundation.crypto import SECRET_MASK
from foundation.ids import free_slug
from foundation.outbound import url_refusal
from resources.mcp.client import mcp_connection_close
from resources.mcp.policy import MCPStdioRefusedError, mcp_stdio_change_check, mcp_stdio_command_refusal
from resources.mcp.refresh import (
    MCPServerDisabledError,
    MCPServerUnavailableError,
    mcp_server_refresh,
    mcp_server_status_record,
    mcp_server_status_set,
    refresh_outcome_key,
)
from resources.mcp.specs import MCPServerIn, MCPServerPatchIn, mcp_url_checked
from resources.models import MCPServer
from resources.services import ResourceValidationError
from resources.tasks import mcp_server_connect
from resources.tasks import mcp_server_refresh as mcp_server_refresh_task

_STDIO_FIELDS = ("command", "args", "env")
_HTTP_FIELDS = ("url", "headers")
# What a server connects with: a save that changes one of these connects it anew.
_CONNECTION_FIELDS = ("transport", *_STDIO_FIELDS, *_HTTP_FIELDS)
# A refresh sent to a worker: the web waits the server's own timeout plus this, at most REFRESH_WAIT_MAX
# seconds (a request thread is held meanwhile), then answers that the refresh goes on. The worker's
# outcome stays in the cache for `refresh.REFRESH_OUTCOME_SECONDS`.
REFRESH_WAIT_GRACE = 5.0
REFRESH_WAIT_MAX = 60.0
REFRESH_POLL_SECONDS = 0.1


class MCPServerAddressRefusedError(FieldsRefusedError):
    """A streamable-HTTP URL the outbound guard refuses (`fields["url"]` says why and what would allow it)."""


class MCPRefreshPendingError(Exception):
    """A refresh sent to a worker that has not answered within the wait; it goes on, and the server's
    `status`, `last_error` and `tools_refreshed_at` will show its outcome."""


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
    connection = mcp_server_connection(server)
    if connection is None:
        if server.status == MCPServer.Status.CONNECTING:
            mcp_server_status_set(server, status=MCPServer.Status.UNKNOWN, last_error="")
        return
    if connection == connection_before:
        return
    mcp_server_status_set(server, status=MCPServer.Status.CONNECTING, last_error="")
    pk, version = server.pk, server.updated_at.isoformat()
    transaction.on_commit(lambda: mcp_server_connect.delay(pk, version))


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


def mcp_server_refresh_queued(*, server: MCPServer) -> MCPServer:
    """Refresh a server in a worker (a stdio server never starts in the web process) and wait a bounded
    time for the outcome: the server refreshed, or the worker's `MCPServerUnavailableError` /
    `MCPServerDisabledError` / `MCPStdioRefusedError`, or `MCPRefreshPendingError` when the worker has not
    answered in time. A command no longer allowed is refused here already, and recorded on the server."""
    if not server.enabled:
        raise MCPServerDisabledError({"enabled": "The server is disabled; enable it to refresh its tools."})
    if server.transport == MCPServer.Transport.STDIO and (refusal := mcp_stdio_command_refusal(server.command)):
        mcp_server_status_record(server=server, error=f"not started: {refusal}")
        raise MCPStdioRefusedError(refusal[0].upper() + refusal[1:], reason="command")
    token = secrets.token_urlsafe(16)
    # Sent at once rather than on commit: the row is already stored, and nothing here is written first.
    mcp_server_refresh_task.delay(server.pk, token)
    deadline = time.monotonic() + min(server.timeout_seconds + REFRESH_WAIT_GRACE, REFRESH_WAIT_MAX)
    while (outcome := cache.get(refresh_outcome_key(token))) is None:
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
