"""The result normalizer (docs/architecture.md, "Runs"): what the host does with each result a runner's stream yields,
before anything is persisted. Pure — no database, no clock — so every rule is unit-tested.

Rules, in order:
- a result that is not an object with a string `type` and an object `data` is dropped (logged);
- the runtime numbers results 1..n (`sequence`); a result whose sequence is not above the highest one
  seen is a duplicate and is dropped (logged);
- a result larger than 1 MiB as JSON is dropped (logged);
- an unknown type is ignored with a warning (the protocol's forward compatibility rule);
- a known type whose payload fails its typed model is dropped (logged) — the rest of the run goes on;
  an invalid *terminal* result is dropped the same way, and the run then ends because the stream ends
  without a terminal result (`runner.invalid_result`).
Accepted results keep the runner's `data` unchanged (it already passed the strict payload model), except
that a NUL character or an unpaired surrogate, which the database cannot store, becomes U+FFFD.

Consecutive `message.delta` results of the same role with text content that arrive while the run's
previous write is in flight are coalesced (`delta_merge`) by the execution before they are persisted,
never held back for it; `outcome_of` maps the terminal result to the run's final status.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from foundation.storable import storable_copy
from langbot_sdk.protocol import (
    MessageCompletedPayload,
    ResultType,
    RunCompletedPayload,
    RunFailedPayload,
    RunFailureCode,
    limits,
    validate_result_payload,
)

logger = logging.getLogger(__name__)

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
# A coalesced delta is flushed before it grows past this, far below the 1 MiB result cap.
DELTA_MERGE_MAX_CHARS = 64 * 1024
TERMINAL_TYPES = frozenset({ResultType.RUN_COMPLETED.value, ResultType.RUN_FAILED.value})


@dataclass
class Accepted:
    type: str
    data: dict[str, Any]
    payload: BaseModel

    @property
    def is_terminal(self) -> bool:
        return self.type in TERMINAL_TYPES


class ResultNormalizer:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.max_sequence = 0
        self.dropped = 0
        self.ignored = 0

    def _drop(self, why: str, *args: Any) -> None:
        self.dropped += 1
        logger.warning("run %s: dropped a result: " + why, self.run_id, *args)

    def accept(self, raw: Any) -> Accepted | None:
        if not isinstance(raw, dict):
            self._drop("not an object (%s)", type(raw).__name__)
            return None
        type_, data, sequence = raw.get("type"), raw.get("data", {}), raw.get("sequence")
        if not isinstance(type_, str) or not type_ or not isinstance(data, dict):
            self._drop("no type or no data object")
            return None
        if isinstance(sequence, int) and not isinstance(sequence, bool):
            if sequence <= self.max_sequence:
                self._drop("duplicate sequence %d (%s)", sequence, type_)
                return None
            self.max_sequence = sequence
        try:
            encoded = _encode({"type": type_, "data": data})
        except (TypeError, ValueError):
            self._drop("%s is not JSON", type_)
            return None
        try:
            size = len(encoded.encode("utf-8"))
            storable = "\\u0000" not in encoded
        except UnicodeEncodeError:
            storable = False
        if not storable:
            # A NUL or an unpaired surrogate would fail the ledger write, and with it the run.
            logger.warning("run %s: replaced text the database cannot store in a %s result", self.run_id, type_)
            data = storable_copy(data)
            size = len(_encode({"type": type_, "data": data}).encode("utf-8"))
        if size > limits.RESULT_EVENT_MAX_BYTES:
            self._drop("%s is %d bytes; the limit is %d", type_, size, limits.RESULT_EVENT_MAX_BYTES)
            return None
        try:
            payload = validate_result_payload(type_, data)
        except ValidationError as exc:
            self._drop("invalid %s payload: %s", type_, exc.errors(include_url=False, include_input=False)[:3])
            return None
        if payload is None:
            self.ignored += 1
            logger.warning("run %s: ignored a result of unknown type %r", self.run_id, type_)
            return None
        return Accepted(type=type_, data=data, payload=payload)


def delta_merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any] | None:
    """`second` appended to `first` when both are plain text chunks of the same role, else None."""
    a, b = first.get("chunk"), second.get("chunk")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    if set(a) - {"role", "content"} or set(b) - {"role", "content"}:
        return None
    if a.get("role", "assistant") != b.get("role", "assistant"):
        return None
    text_a, text_b = a.get("content"), b.get("content")
    if not isinstance(text_a, str) or not isinstance(text_b, str):
        return None
    if len(text_a) + len(text_b) > DELTA_MERGE_MAX_CHARS:
        return None
    return {"chunk": {**a, "content": text_a + text_b}}


def delta_text(data: dict[str, Any]) -> str:
    chunk = data.get("chunk")
    content = chunk.get("content") if isinstance(chunk, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def message_of(accepted: Accepted) -> tuple[str, list[dict[str, Any]]]:
    """The text and (for multimodal messages) the content parts of a `message.completed`."""
    payload = accepted.payload
    assert isinstance(payload, MessageCompletedPayload)
    content = payload.message.content
    parts = [p.model_dump(mode="json", exclude_none=True) for p in content] if isinstance(content, list) else []
    return payload.message.text(), parts


@dataclass
class Outcome:
    status: str
    status_reason: str
    error: dict[str, Any] | None
    usage: dict[str, Any] | None


def outcome_of(terminal: Accepted, *, cancel_reason: str | None) -> Outcome:
    """The run's final status from its terminal result: `run.completed` → completed; `run.failed` with
    `runner.timeout` → timeout; `cancelled` → cancelled (reason: the cancel request's, else the
    runner's); `worker_shutdown` → failed/worker_shutdown; any other code → failed with the error."""
    payload = terminal.payload
    if isinstance(payload, RunCompletedPayload):
        return Outcome("completed", "", None, payload.usage)
    assert isinstance(payload, RunFailedPayload)
    error = payload.model_dump(mode="json")
    if payload.code == RunFailureCode.RUNNER_TIMEOUT.value:
        return Outcome("timeout", payload.code, error, None)
    if payload.code == RunFailureCode.CANCELLED.value:
        reason = cancel_reason or str(payload.details.get("reason") or "") or "cancelled"
        return Outcome("cancelled", reason[:200], error, None)
    return Outcome("failed", payload.code[:200], error, None)
