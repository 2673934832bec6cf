"""Token arithmetic: a local estimate, its calibration against the host's `count_tokens`, and cutting text
to a token budget with a visible marker.

The host's count (tiktoken, or its own flagged estimate) is one round trip, so the runner asks it once per
model call for the whole prompt and scales its per-message local estimates by the ratio; without the
count_tokens API (an older host, a refused call) the local estimate stands alone. The estimate counts a
CJK character as one token and other text as one token per four characters, plus a few tokens per
message for the chat format, which errs on the high side for English and is close for Chinese.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langbot_sdk.protocol import AgentAPIException
from langbot_sdk.proxy import AgentRunAPIProxy

MESSAGE_OVERHEAD_TOKENS = 4
IMAGE_TOKENS = 765
"""What a high-detail image costs a typical vision model; images are budgeted at this flat rate."""


def _is_wide(char: str) -> bool:
    code = ord(char)
    return (
        0x3040 <= code <= 0x30FF  # kana
        or 0x3400 <= code <= 0x9FFF  # CJK ideographs
        or 0xAC00 <= code <= 0xD7AF  # hangul
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
    )


def estimate_text_tokens(text: str) -> int:
    if not text:
        return 0
    wide = sum(1 for char in text if _is_wide(char))
    return wide + math.ceil((len(text) - wide) / 4)


def estimate_message_tokens(message: dict[str, Any]) -> int:
    """Local estimate of one chat message (text parts, images at a flat rate, tool calls' arguments)."""
    tokens = MESSAGE_OVERHEAD_TOKENS
    content = message.get("content")
    if isinstance(content, str):
        tokens += estimate_text_tokens(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text":
                tokens += estimate_text_tokens(str(part.get("text") or ""))
            elif part.get("type") in ("image_url", "image_base64"):
                tokens += IMAGE_TOKENS
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        tokens += estimate_text_tokens(str(function.get("name") or "")) + estimate_text_tokens(
            str(function.get("arguments") or "")
        )
    return tokens


def truncate_to_tokens(text: str, max_tokens: int, *, marker: str = "[… {omitted} characters omitted]") -> str:
    """`text` cut to about `max_tokens`, ending with `marker` (which may name `{omitted}` characters)."""
    if estimate_text_tokens(text) <= max_tokens:
        return text
    keep = max(0, int(len(text) * max_tokens / max(1, estimate_text_tokens(text))) - len(marker))
    # Walk back until the estimate fits: wide characters make the proportional guess optimistic.
    while keep > 0 and estimate_text_tokens(text[:keep]) > max_tokens:
        keep = int(keep * 0.9)
    return text[:keep].rstrip() + "\n" + marker.format(omitted=len(text) - keep)


@dataclass
class TokenCounter:
    """Local estimates, scaled by what the host said the last time it was asked (`calibrate`)."""

    ratio: float = 1.0
    host_counted: bool = False
    """Whether the ratio comes from the host's count (else it is the bare local estimate)."""

    def message(self, message: dict[str, Any]) -> int:
        return math.ceil(estimate_message_tokens(message) * self.ratio)

    def messages(self, messages: Sequence[dict[str, Any]]) -> int:
        return sum(self.message(m) for m in messages)

    def text(self, text: str) -> int:
        return math.ceil(estimate_text_tokens(text) * self.ratio)

    async def calibrate(self, api: AgentRunAPIProxy, model_id: str, messages: Sequence[dict[str, Any]]) -> None:
        """Ask the host to count `messages` once; keep the local estimate when it cannot."""
        if not messages:
            return
        try:
            counted = await api.models.count_tokens(model_id, list(messages))
        except AgentAPIException:
            return
        local = sum(estimate_message_tokens(m) for m in messages)
        if counted.tokens > 0 and local > 0:
            # Bounded: a wildly different count means the two measured different things (e.g. images).
            self.ratio = max(0.25, min(4.0, counted.tokens / local))
            self.host_counted = True
