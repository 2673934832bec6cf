"""Who may make the host run a program: the rules for stdio MCP servers, read when a server is saved (REST,
admin) and again before its process starts (`resources.mcp.client`).

A stdio server is a command a worker starts, with the worker's user and network: an operator's decision,
never a tenant's.
- Making a server stdio, or changing a stdio server's `command`, `args` or `env`, is for an operator: an API
  key with the operator scope, a staff member's session, or the admin (staff only). A workspace's ordinary
  key gets 403 `mcp.stdio_not_allowed`; it may still rename, time, enable, disable, refresh or delete a
  stdio server an operator set up, or switch it to streamable HTTP (which runs nothing).
- The command must be an absolute, normalized path matching one entry of `LANGBOT_MCP_STDIO_COMMANDS`
  (absolute paths or fnmatch patterns; `*` also matches `/`). A bare name is refused rather than looked up
  on PATH: which program a name means depends on the worker's PATH, and the operator allowlisted a file.
  Empty (the default), no stdio server is saved or started. A server saved before its command left the
  list does not start; the refusal is its `last_error`.
The allowlist fences what runs, not what it does: an allowed interpreter or package runner (python, uvx,
npx) runs whatever its arguments say, which is why the arguments are an operator's too.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from resources.models import MCPServer

STDIO_SETTING = "LANGBOT_MCP_STDIO_COMMANDS"
REFUSED_CODE = "mcp.stdio_not_allowed"
OPERATOR_ONLY = (
    "Stdio MCP servers run a program on the host's workers: only an operator may add one or change its "
    "command, args or env (an API key with the operator scope, or staff in the admin). A workspace key may "
    "add streamable_http servers."
)


class MCPStdioRefusedError(Exception):
    """A stdio server the policy refuses; `reason` is `operator` (the caller is no operator) or `command`
    (the command is not on the allowlist). The message is safe to show to the caller."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def mcp_stdio_commands() -> list[str]:
    return [pattern.strip() for pattern in getattr(settings, STDIO_SETTING, []) if pattern.strip()]


def mcp_stdio_command_refusal(command: str) -> str | None:
    """Why the host may not start `command` as a stdio MCP server (None when it may). Never names the
    allowlist's entries: the answer goes to tenants too."""
    patterns = mcp_stdio_commands()
    if not patterns:
        return (
            f"stdio MCP servers are off on this host ({STDIO_SETTING} is empty); an operator may allow commands there."
        )
    if not os.path.isabs(command) or os.path.normpath(command) != command:
        return (
            f"the command must be an absolute, normalized path (e.g. /usr/bin/uvx) allowed by {STDIO_SETTING}; "
            "names are not looked up on PATH."
        )
    if not any(fnmatch.fnmatchcase(command, pattern) for pattern in patterns):
        return f"the command {command} is not allowed on this host; an operator may allow it in {STDIO_SETTING}."
    return None


def mcp_stdio_change_check(
    *,
    command: str,
    args: Sequence[str],
    env: Mapping[str, str],
    stored: MCPServer | None,
    operator: bool,
) -> None:
    """Raise `MCPStdioRefusedError` unless the caller may save a stdio server with this command, args and
    env over `stored` (the server as saved before, None for a new one). A stored stdio server whose
    command, args and env stay as they are needs no operator (nor a command still on the list: it will
    not start, but it may be renamed, disabled or deleted)."""
    changed = (
        stored is None
        or stored.transport != "stdio"
        or stored.command != command
        or list(stored.args or []) != list(args)
        or dict(stored.env or {}) != dict(env)
    )
    if changed and not operator:
        raise MCPStdioRefusedError(OPERATOR_ONLY, reason="operator")
    refusal = mcp_stdio_command_refusal(command)
    if refusal is not None and changed:
        raise MCPStdioRefusedError(refusal[0].upper() + refusal[1:], reason="command")
