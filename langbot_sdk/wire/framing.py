"""Frame encoding and decoding for the LangBot wire protocol (docs/protocol.md, "Wire").

What belongs here: turning frame dicts into bytes and back, classifying a decoded object as a request or
a response, validating their fields, and recovering a seq_id from the head of a frame too big to decode.
Nothing here does I/O; the Connection and the transports build on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from langbot_sdk.protocol.limits import WIRE_MESSAGE_MAX_BYTES

MAX_WIRE_MESSAGE_BYTES: Final = WIRE_MESSAGE_MAX_BYTES
"""The cap on one encoded frame (docs/protocol.md, "Caps"), under the name the wire contract uses."""

CHUNK_CONTINUE: Final = "continue"
CHUNK_END: Final = "end"

# One encoder instance avoids json.dumps re-validating its keyword arguments on every frame.
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_decode = json.loads

# How much of an oversize frame a transport keeps so the Connection can tell who it belonged to.
OVERSIZE_HEAD_BYTES: Final = 4096

# Our encoder writes seq_id first and action/code second; peers written elsewhere may put action first.
_HEAD_SEQ_THEN_KIND = re.compile(rb'^\s*\{\s*"seq_id"\s*:\s*(-?\d+)\s*,\s*"(action|code)"\s*:')
_HEAD_KIND_THEN_SEQ = re.compile(
    rb'^\s*\{\s*"(action|code)"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)\s*,\s*"seq_id"\s*:\s*(-?\d+)\s*[,}]'
)


class FrameEncodeError(Exception):
    """A frame could not be encoded: its data is not JSON-serializable."""


def encode_frame(frame: dict[str, Any]) -> bytes:
    """Encode one frame as compact UTF-8 JSON, without a delimiter."""
    try:
        return _encoder.encode(frame).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise FrameEncodeError(str(exc)) from exc


def request_frame(seq_id: int, action: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"seq_id": seq_id, "action": action, "data": data}


def response_frame(
    seq_id: int | None,
    data: dict[str, Any],
    *,
    chunk_status: Literal["continue", "end"] = CHUNK_END,
) -> dict[str, Any]:
    return {"seq_id": seq_id, "code": 0, "message": "", "data": data, "chunk_status": chunk_status}


def error_frame(seq_id: int | None, error: dict[str, Any]) -> dict[str, Any]:
    """An `end` frame with code 1; `error` is an AgentAPIError as a dict."""
    return {
        "seq_id": seq_id,
        "code": 1,
        "message": str(error.get("message", "")),
        "data": {"error": error},
        "chunk_status": CHUNK_END,
    }


@dataclass(slots=True)
class Request:
    seq_id: int
    action: str
    data: dict[str, Any]


@dataclass(slots=True)
class Response:
    seq_id: int | None
    code: int
    message: str
    data: dict[str, Any]
    chunk_status: str


@dataclass(slots=True)
class MalformedFrame:
    """A frame that cannot be acted on. `is_response` says the peer meant it as a response, so its seq_id
    (if any) belongs to OUR request namespace, not the peer's."""

    reason: str
    seq_id: int | None
    is_response: bool


Frame = Request | Response | MalformedFrame


def _as_seq_id(value: Any) -> int | None:
    # bool is an int subclass; `true` is not a sequence number.
    if type(value) is int:
        return value
    return None


def decode_frame(raw: bytes | str) -> Frame:
    """Decode and classify one frame. Never raises for bad input; returns MalformedFrame instead.

    A frame with an `action` key is a request, a frame with a `code` key is a response (contract); a frame
    with neither is treated as a broken request, since only requests lack a `code`.
    """
    try:
        obj = _decode(raw)
    except (ValueError, RecursionError):
        return MalformedFrame("frame is not valid JSON", None, False)
    if not isinstance(obj, dict):
        return MalformedFrame("frame is not a JSON object", None, False)

    seq_id = _as_seq_id(obj.get("seq_id"))
    if "action" in obj or "code" not in obj:
        action = obj.get("action")
        data = obj.get("data")
        if seq_id is None:
            return MalformedFrame("request seq_id must be an integer", None, False)
        if not isinstance(action, str) or not action:
            return MalformedFrame("request action must be a non-empty string", seq_id, False)
        if not isinstance(data, dict):
            return MalformedFrame("request data must be an object", seq_id, False)
        return Request(seq_id, action, data)

    code = obj["code"]
    raw_seq = obj.get("seq_id")
    if raw_seq is not None and seq_id is None:
        return MalformedFrame("response seq_id must be an integer or null", None, True)
    if type(code) is not int or code not in (0, 1):
        return MalformedFrame("response code must be 0 or 1", seq_id, True)
    data = obj.get("data", {})
    if not isinstance(data, dict):
        return MalformedFrame("response data must be an object", seq_id, True)
    chunk_status = obj.get("chunk_status", CHUNK_END)
    if chunk_status not in (CHUNK_CONTINUE, CHUNK_END):
        return MalformedFrame("response chunk_status must be 'continue' or 'end'", seq_id, True)
    message = obj.get("message", "")
    if not isinstance(message, str):
        message = str(message)
    return Response(seq_id, code, message, data, chunk_status)


def peek_oversize_head(head: bytes) -> tuple[int | None, bool]:
    """Recover (seq_id, is_response) from the first bytes of a frame too big to decode.

    Only a top-level seq_id next to a top-level action/code is trusted: a seq_id found deeper inside
    `data` could name someone else's call.
    """
    match = _HEAD_SEQ_THEN_KIND.match(head)
    if match is not None:
        return int(match.group(1)), match.group(2) == b"code"
    match = _HEAD_KIND_THEN_SEQ.match(head)
    if match is not None:
        return int(match.group(3)), match.group(1) == b"code"
    return None, False
