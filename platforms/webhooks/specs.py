"""Input shapes of the completion webhook endpoints (docs/architecture.md, "The REST API"), as strict pydantic models:
unknown keys are errors, and a bad field answers 400 `invalid_argument` naming it."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bindings.specs import Slug
from platforms.webhooks.signing import secret_problem

EventType = Literal[
    "run.completed",
    "run.failed",
    "run.cancelled",
    "action.requested",
    "handoff.requested",
    "alert.raised",
    "alert.resolved",
]
GRACE_MAX_SECONDS = 7 * 24 * 3600
DEFAULT_GRACE_SECONDS = 24 * 3600


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


def url_checked(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("Must be an http:// or https:// URL with a host.")
    if parts.username or parts.password:
        raise ValueError("Must not carry credentials; sign with the endpoint's secret instead.")
    return value.strip()


def event_types_checked(value: list[str]) -> list[str]:
    return sorted(set(value))


class WebhookEndpointIn(_Input):
    url: str = Field(max_length=2000, description="Where the signed POSTs go (http or https).")
    event_types: list[EventType] = Field(min_length=1, max_length=7)
    binding_id: Slug | None = None
    """Only the runs of this binding of the workspace; every run of the workspace when omitted."""
    description: str = Field(default="", max_length=200)
    enabled: bool = True
    secret: str | None = Field(default=None, max_length=200)
    """Write-only `whsec_<base64 of 24-64 bytes>`; generated when omitted. Shown once, in the answer."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return url_checked(value)

    @field_validator("event_types")
    @classmethod
    def _event_types(cls, value: list[str]) -> list[str]:
        return event_types_checked(value)

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        problem = secret_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value


class WebhookEndpointPatchIn(_Input):
    """Any subset of the endpoint's keys; `binding_id: null` widens it to the whole workspace. The secret
    changes only by rotation."""

    url: str | None = Field(default=None, max_length=2000)
    event_types: list[EventType] | None = Field(default=None, min_length=1, max_length=7)
    binding_id: Slug | None = None
    description: str | None = Field(default=None, max_length=200)
    enabled: bool | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return url_checked(value) if value is not None else None

    @field_validator("event_types")
    @classmethod
    def _event_types(cls, value: list[str] | None) -> list[str] | None:
        return event_types_checked(value) if value is not None else None


class SecretRotateIn(_Input):
    grace_seconds: int = Field(default=DEFAULT_GRACE_SECONDS, ge=0, le=GRACE_MAX_SECONDS)
    """How long the old secret still signs beside the new one (a second signature); 0 ends it now."""
    secret: str | None = Field(default=None, max_length=200)
    """The new `whsec_...` secret; generated when omitted."""

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        problem = secret_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value


class DeliveryStatusIn(_Input):
    status: Literal["pending", "succeeded", "failed"] | None = None
