"""Host-owned state and plugin storage: scopes, areas, proxy request payloads and their results.

State holds small JSON values (≤ 256 KiB) per conversation/actor/subject/runner/binding; storage holds
bytes (≤ 10 MiB, base64 on the wire) per plugin/workspace/binding area. The host isolates keys per
runner and binding, so the same key in two bindings never collides.
"""

from __future__ import annotations

import base64
import binascii
import json
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from langbot_sdk.protocol.base import HostModel, ProxyRequest
from langbot_sdk.protocol.errors import AgentAPIException
from langbot_sdk.protocol.limits import (
    STATE_KEY_MAX_LENGTH,
    STATE_LIST_MAX_KEYS,
    STATE_VALUE_MAX_BYTES,
    STORAGE_KEY_MAX_LENGTH,
    STORAGE_LIST_MAX_KEYS,
    STORAGE_VALUE_MAX_BYTES,
)


class StateScope(StrEnum):
    CONVERSATION = "conversation"
    ACTOR = "actor"
    SUBJECT = "subject"
    RUNNER = "runner"
    BINDING = "binding"
    # The person the actor is linked to (the host's people): follows them across channels.
    PERSON = "person"


class StorageArea(StrEnum):
    PLUGIN = "plugin"
    WORKSPACE = "workspace"
    BINDING = "binding"


# Control characters would corrupt the host's composite keys and log lines.
StateKey = Annotated[
    str, StringConstraints(min_length=1, max_length=STATE_KEY_MAX_LENGTH, pattern=r"^[^\x00-\x1f\x7f]+$")
]
StorageKey = Annotated[
    str, StringConstraints(min_length=1, max_length=STORAGE_KEY_MAX_LENGTH, pattern=r"^[^\x00-\x1f\x7f]+$")
]


def state_value_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON; raises ``ValueError`` if it is not JSON-serialisable."""
    try:
        encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"state value is not JSON-serialisable: {exc}") from None
    return len(encoded.encode("utf-8"))


def state_value_checked(value: Any) -> int:
    """The JSON size of a state value within the cap; raises ``AgentAPIException`` (``invalid_argument``
    when it is not JSON, ``payload_too_large`` over the cap). The one check the SDK and the host share."""
    try:
        size = state_value_size(value)
    except ValueError as exc:
        raise AgentAPIException.invalid_argument(str(exc)) from None
    if size > STATE_VALUE_MAX_BYTES:
        raise AgentAPIException.payload_too_large(
            f"state value is {size} bytes as JSON; the limit is {STATE_VALUE_MAX_BYTES}",
            size=size,
            max_bytes=STATE_VALUE_MAX_BYTES,
        )
    return size


def check_state_value(value: Any) -> Any:
    """``state_value_checked`` for pydantic validators, which report ``ValueError``."""
    try:
        state_value_checked(value)
    except AgentAPIException as exc:
        raise ValueError(exc.error.message) from None
    return value


def decode_base64(value: str, *, limit: int, what: str) -> bytes:
    """Strictly decode base64 and enforce a decoded-size cap; raises ``ValueError`` with ``what`` named."""
    # Decoded size is at most 3/4 of the text; refuse huge inputs before allocating.
    if len(value) // 4 * 3 > limit + 3:
        raise ValueError(f"{what} is larger than the limit of {limit} bytes")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64") from None
    if len(data) > limit:
        raise ValueError(f"{what} is {len(data)} bytes; the limit is {limit}")
    return data


class StateGetRequest(ProxyRequest):
    scope: StateScope
    key: StateKey


class StateSetRequest(ProxyRequest):
    scope: StateScope
    key: StateKey
    value: Any

    @field_validator("value")
    @classmethod
    def _value_fits(cls, value: Any) -> Any:
        return check_state_value(value)


class StateDeleteRequest(ProxyRequest):
    scope: StateScope
    key: StateKey


class StateListRequest(ProxyRequest):
    scope: StateScope
    prefix: str | None = None
    limit: int = Field(default=STATE_LIST_MAX_KEYS, ge=1, le=STATE_LIST_MAX_KEYS)


class StateGetResult(HostModel):
    found: bool
    value: Any = None


class StateSetResult(HostModel):
    ok: bool = True


class StateDeleteResult(HostModel):
    deleted: bool


class StateListResult(HostModel):
    keys: list[str] = Field(default_factory=list)
    has_more: bool = False


class StorageGetRequest(ProxyRequest):
    area: StorageArea
    key: StorageKey


class StorageSetRequest(ProxyRequest):
    area: StorageArea
    key: StorageKey
    value_base64: str

    @field_validator("value_base64")
    @classmethod
    def _value_fits(cls, value: str) -> str:
        decode_base64(value, limit=STORAGE_VALUE_MAX_BYTES, what="storage value")
        return value


class StorageDeleteRequest(ProxyRequest):
    area: StorageArea
    key: StorageKey


class StorageListRequest(ProxyRequest):
    area: StorageArea
    prefix: str | None = None
    limit: int = Field(default=STORAGE_LIST_MAX_KEYS, ge=1, le=STORAGE_LIST_MAX_KEYS)


class StorageGetResult(HostModel):
    found: bool
    value_base64: str | None = None

    def value(self) -> bytes | None:
        """The stored bytes, or ``None`` when the key does not exist."""
        if not self.found or self.value_base64 is None:
            return None
        return base64.b64decode(self.value_base64)


class StorageSetResult(HostModel):
    ok: bool = True
    size: int | None = None


class StorageDeleteResult(HostModel):
    deleted: bool


class StorageListResult(HostModel):
    keys: list[str] = Field(default_factory=list)
    has_more: bool = False
