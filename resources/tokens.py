"""Token counting for a model, offline: tiktoken with the encodings the `litellm` distribution ships
(tiktoken alone would download them on first use, and hosts may have no internet).

A model whose name tiktoken maps to an encoding (OpenAI's models) is counted exactly; any other model —
most OpenAI-compatible providers serve their own tokenizers — is counted with `cl100k_base` and the count
is flagged `estimated`, as is any count that includes images, whose cost depends on sizes the host does not
know. Where no encoding can be loaded at all the count falls back to bytes / 4, also flagged.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import tiktoken

from langbot_sdk.protocol import Message

logger = logging.getLogger(__name__)

FALLBACK_ENCODING = "cl100k_base"
# Chat formatting around each message and before the reply, as OpenAI's chat models count it.
MESSAGE_OVERHEAD_TOKENS = 3
NAME_OVERHEAD_TOKENS = 1
REPLY_PRIMING_TOKENS = 3
# An image's cost depends on its size and detail; this is the cost of one high-detail 512×512 tile plus
# the base, a middle estimate.
IMAGE_ESTIMATE_TOKENS = 255


@dataclass(frozen=True)
class TokenCount:
    tokens: int
    encoding: str
    estimated: bool


def _bundled_encodings_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    directory = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return directory if directory.is_dir() else None


@lru_cache(maxsize=8)
def _encoding(name: str) -> tiktoken.Encoding | None:
    # tiktoken looks in TIKTOKEN_CACHE_DIR before downloading; an operator's own cache wins.
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        bundled = _bundled_encodings_dir()
        if bundled is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    try:
        return tiktoken.get_encoding(name)
    except Exception:  # a missing file becomes a download attempt, which fails offline in many ways
        logger.warning("tiktoken encoding %s is not available; token counts are estimated", name)
        return None


def model_encoding_name(model_name: str) -> str | None:
    """The tiktoken encoding of a model tiktoken knows (by name or prefix), else None."""
    try:
        return tiktoken.encoding_name_for_model(model_name)
    except KeyError:
        return None


def _message_parts(message: Message) -> tuple[list[str], int]:
    """The texts of a message to count, and how many images it carries."""
    texts = [message.role]
    images = 0
    if isinstance(message.content, str):
        texts.append(message.content)
    elif message.content:
        for part in message.content:
            if part.type == "text" and part.text:
                texts.append(part.text)
            elif part.type.startswith("image"):
                images += 1
    if message.name:
        texts.append(message.name)
    for call in message.tool_calls or []:
        texts += [call.function.name, call.function.arguments]
    return texts, images


def token_count(*, model_name: str, messages: list[Message], text: str | None) -> TokenCount:
    """Tokens of `messages` as a chat prompt (with the reply priming) plus `text` as plain text."""
    exact_name = model_encoding_name(model_name)
    name = exact_name or FALLBACK_ENCODING
    encoding = _encoding(name)
    estimated = exact_name is None or encoding is None

    def count(value: str) -> int:
        if encoding is None:
            return (len(value.encode()) + 3) // 4
        return len(encoding.encode(value, disallowed_special=()))

    tokens = count(text) if text else 0
    for message in messages:
        texts, images = _message_parts(message)
        tokens += MESSAGE_OVERHEAD_TOKENS + sum(count(value) for value in texts)
        tokens += NAME_OVERHEAD_TOKENS if message.name else 0
        if images:
            tokens += images * IMAGE_ESTIMATE_TOKENS
            estimated = True
    if messages:
        tokens += REPLY_PRIMING_TOKENS
    return TokenCount(tokens=tokens, encoding=name if encoding is not None else "bytes/4", estimated=estimated)
