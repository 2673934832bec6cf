"""Input shapes for model providers and models (docs/architecture.md, "The REST API"), as strict pydantic models shared
by the API and the admin. Unknown keys are errors; `bindings.specs.field_errors` names the bad fields."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from bindings.specs import Slug

ModelKind = Literal["llm", "embedding", "rerank"]
TIMEOUT_MAX_SECONDS = 600
MAX_RETRIES_LIMIT = 10
HEADERS_LIMIT = 50
TOKENS_LIMIT = 100_000_000
# RFC 9110 `token`: what an HTTP header name may be.
HeaderName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")]
# Prices per million tokens: what `Model`'s columns hold (14 digits, 6 after the point).
Price = Annotated[Decimal, Field(ge=0, max_digits=14, decimal_places=6)]
_HEADER_VALUE = re.compile(r"^[^\r\n\x00]*$")


class _Input(BaseModel):
    # `model_id` is a field name here, not pydantic's `model_` namespace.
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


def base_url_checked(value: str) -> str:
    """An http(s) URL with a host, without its trailing slash (the SDK appends `/models`, ...)."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("Must be an http:// or https:// URL with a host, e.g. https://api.openai.com/v1.")
    if parts.query or parts.fragment:
        raise ValueError("Must not have a query string or fragment.")
    return value.strip().rstrip("/")


def headers_checked(value: dict[str, str]) -> dict[str, str]:
    if len(value) > HEADERS_LIMIT:
        raise ValueError(f"At most {HEADERS_LIMIT} headers.")
    for header, text in value.items():
        if len(text) > 4096 or not _HEADER_VALUE.match(text):
            raise ValueError(f"The value of {header} must be one line of at most 4096 characters.")
    return value


class ModelProviderIn(_Input):
    """A whole provider, as created (or as a PATCH leaves it)."""

    provider_id: Slug | None = None
    """Generated from the name when omitted; unique per workspace; cannot change."""
    name: str = Field(min_length=1, max_length=200)
    base_url: str = Field(max_length=500, description="OpenAI-compatible base URL, e.g. https://api.openai.com/v1")
    api_key: str = Field(default="", max_length=4096)
    """Write-only. Empty for an endpoint that needs none; the mask keeps the stored key."""
    headers: dict[HeaderName, str] = Field(default_factory=dict)
    """Extra headers sent with every request. Write-only values: answers show them masked; a masked value
    sent back keeps the stored one; a header left out is removed."""
    timeout_seconds: int = Field(default=60, ge=1, le=TIMEOUT_MAX_SECONDS)
    max_retries: int = Field(default=2, ge=0, le=MAX_RETRIES_LIMIT)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return base_url_checked(value)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        return headers_checked(value)


class ModelProviderPatchIn(_Input):
    """Any subset of `ModelProviderIn`'s keys."""

    provider_id: Slug | None = None
    name: str | None = Field(default=None, min_length=1, max_length=200)
    base_url: str | None = Field(default=None, max_length=500)
    api_key: str | None = Field(default=None, max_length=4096)
    headers: dict[HeaderName, str] | None = None
    timeout_seconds: int | None = Field(default=None, ge=1, le=TIMEOUT_MAX_SECONDS)
    max_retries: int | None = Field(default=None, ge=0, le=MAX_RETRIES_LIMIT)


class ModelIn(_Input):
    model_id: Slug | None = None
    """Generated from the name when omitted; unique per workspace; cannot change. What bindings allow
    (`resource_policy.allowed_model_ids`)."""
    provider_id: Slug
    name: str = Field(min_length=1, max_length=200, description="The provider's model name, e.g. gpt-4o-mini.")
    kind: ModelKind
    supports_tools: bool = False
    supports_vision: bool = False
    context_window: int | None = Field(default=None, ge=1, le=TOKENS_LIMIT)
    max_output_tokens: int | None = Field(default=None, ge=1, le=TOKENS_LIMIT)
    input_price_per_million: Price | None = None
    """What one million input tokens cost, in the host's cost currency (a decimal string or number); null:
    not priced."""
    output_price_per_million: Price | None = None
    """What one million output tokens cost; null: not priced."""


class ModelPatchIn(_Input):
    """Any subset of `ModelIn`'s keys; `context_window`, `max_output_tokens` and the prices may be set to
    null."""

    model_id: Slug | None = None
    provider_id: Slug | None = None
    name: str | None = Field(default=None, min_length=1, max_length=200)
    kind: ModelKind | None = None
    supports_tools: bool | None = None
    supports_vision: bool | None = None
    context_window: int | None = Field(default=None, ge=1, le=TOKENS_LIMIT)
    max_output_tokens: int | None = Field(default=None, ge=1, le=TOKENS_LIMIT)
    input_price_per_million: Price | None = None
    output_price_per_million: Price | None = None
