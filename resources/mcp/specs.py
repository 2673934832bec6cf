"""Input shapes for MCP servers (docs/architecture.md, "The REST API"), strict pydantic models shared by the API and the
admin.

A server speaks one transport: `stdio` needs a `command` (with `args` and `env`), `http` (streamable HTTP;
`streamable_http` is accepted as its other name) needs an http(s) `url` (with `headers`). The fields of
the other transport must be left empty, so a body that mixes them is refused rather than half ignored
(those cross-field checks are `resources.mcp.services`', which report them by field).
`env` and `headers` values are write-only (answers mask them; a mask sent back keeps the stored value).
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from bindings.specs import Slug
from resources.specs import HeaderName, headers_checked

TIMEOUT_MAX_SECONDS = 600
ARGS_LIMIT = 100
ENV_LIMIT = 100
VALUE_MAX_CHARS = 4096

Transport = Literal["stdio", "http", "streamable_http"]
EnvName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Arg = Annotated[str, StringConstraints(max_length=VALUE_MAX_CHARS)]


def mcp_url_checked(value: str) -> str:
    """An http(s) URL with a host; unlike a model provider's base URL it may carry a query string (some
    MCP endpoints take their key there)."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("Must be an http:// or https:// URL with a host, e.g. https://mcp.example.com/mcp.")
    if parts.fragment:
        raise ValueError("Must not have a fragment.")
    return value.strip()


def env_checked(value: dict[str, str]) -> dict[str, str]:
    if len(value) > ENV_LIMIT:
        raise ValueError(f"At most {ENV_LIMIT} variables.")
    for name, text in value.items():
        if len(text) > VALUE_MAX_CHARS or "\x00" in text:
            raise ValueError(f"The value of {name} must be at most {VALUE_MAX_CHARS} characters, without NUL.")
    return value


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MCPServerIn(_Input):
    """A whole server, as created (or as a PATCH leaves it)."""

    server_id: Slug | None = None
    """Generated from the name when omitted; unique per workspace; cannot change. Tools of this server
    that collide with another server's are named `<server_id>__<name>`."""
    name: str = Field(min_length=1, max_length=200)
    transport: Transport
    command: str = Field(default="", max_length=500, description="stdio: the executable, e.g. npx or uvx.")
    args: list[Arg] = Field(default_factory=list, max_length=ARGS_LIMIT)
    env: dict[EnvName, str] = Field(default_factory=dict)
    """stdio: the server process's environment (over PATH, HOME and a few other safe variables; the host's
    own environment is never passed). Write-only values."""
    url: str = Field(default="", max_length=500, description="http: the streamable-HTTP endpoint.")
    headers: dict[HeaderName, str] = Field(default_factory=dict)
    """http: headers sent with every request (e.g. Authorization). Write-only values."""
    timeout_seconds: int = Field(default=30, ge=1, le=TIMEOUT_MAX_SECONDS)
    """Bounds connecting, listing and each tool call (a run's call gets less when the run has less left)."""
    enabled: bool = True

    @field_validator("transport")
    @classmethod
    def _transport(cls, value: str) -> str:
        return "http" if value == "streamable_http" else value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return env_checked(value)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        return headers_checked(value)


class MCPServerPatchIn(_Input):
    """Any subset of `MCPServerIn`'s keys. Switching `transport` drops the stored fields of the old one."""

    server_id: Slug | None = None
    name: str | None = Field(default=None, min_length=1, max_length=200)
    transport: Transport | None = None
    command: str | None = Field(default=None, max_length=500)
    args: list[Arg] | None = Field(default=None, max_length=ARGS_LIMIT)
    env: dict[EnvName, str] | None = None
    url: str | None = Field(default=None, max_length=500)
    headers: dict[HeaderName, str] | None = None
    timeout_seconds: int | None = Field(default=None, ge=1, le=TIMEOUT_MAX_SECONDS)
    enabled: bool | None = None
