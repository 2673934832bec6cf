"""Parsed blocks to retrieval chunks, budgeted in tokens (cl100k_base, as most embedding models count).

A chunk gathers whole paragraphs of one section until the budget is reached; a heading always starts a new
chunk, so a chunk never mixes two sections. A paragraph larger than the budget is cut at sentence ends
(lines, then words, as last resorts). Consecutive chunks of one section overlap by up to `overlap` tokens
of whole trailing sentences, so a passage cut by a boundary is still found whole in one of the two.

Each chunk's metadata says where it came from: `heading` (the nearest one), `headings` (the path from the
top level), `page` and `page_end` for paged documents.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from resources.knowledge.parsing import Block
from resources.tokens import FALLBACK_ENCODING, token_count

DEFAULT_CHUNK_TOKENS = 400
DEFAULT_OVERLAP_TOKENS = 60
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])")


@dataclass
class Chunk:
    text: str
    token_count: int
    metadata: dict[str, Any] = field(default_factory=dict)


def tokens_of(text: str) -> int:
    return token_count(model_name=FALLBACK_ENCODING, messages=[], text=text).tokens


def _pieces(text: str, budget: int, count: Callable[[str], int]) -> list[str]:
    """`text` cut into pieces of at most `budget` tokens: at sentence ends, else lines, else words."""
    if count(text) <= budget:
        return [text]
    for splitter in (_SENTENCE_END, re.compile(r"\n+"), re.compile(r"\s+")):
        parts = [part for part in splitter.split(text) if part.strip()]
        if len(parts) > 1:
            break
    else:
        # One unbroken run (CJK without punctuation, a long token): cut by characters.
        size = max(1, len(text) * budget // max(count(text), 1))
        return [text[i : i + size] for i in range(0, len(text), size)]
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for part in parts:
        tokens = count(part)
        if tokens > budget:
            if current:
                pieces.append(" ".join(current))
                current, used = [], 0
            pieces.extend(_pieces(part, budget, count))
            continue
        if used + tokens > budget and current:
            pieces.append(" ".join(current))
            current, used = [], 0
        current.append(part)
        used += tokens
    if current:
        pieces.append(" ".join(current))
    return pieces


def _tail(text: str, overlap: int, count: Callable[[str], int]) -> str:
    """The last whole sentences of `text` within `overlap` tokens ("" when even the last one is longer)."""
    if overlap <= 0:
        return ""
    sentences = [part for part in _SENTENCE_END.split(text) if part.strip()]
    kept: list[str] = []
    used = 0
    for sentence in reversed(sentences):
        tokens = count(sentence)
        if used + tokens > overlap:
            break
        kept.insert(0, sentence)
        used += tokens
    return " ".join(kept)


def document_chunk(
    blocks: list[Block],
    *,
    max_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_OVERLAP_TOKENS,
    count: Callable[[str], int] = tokens_of,
) -> list[Chunk]:
    chunks: list[Chunk] = []
    headings: list[tuple[int, str]] = []
    parts: list[str] = []
    pages: list[int] = []
    used = 0

    def metadata() -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if headings:
            meta["heading"] = headings[-1][1]
            meta["headings"] = [text for _, text in headings]
        if pages:
            meta["page"] = min(pages)
            if max(pages) != min(pages):
                meta["page_end"] = max(pages)
        return meta

    def close(*, carry: bool) -> None:
        nonlocal parts, pages, used
        if not parts:
            return
        text = "\n\n".join(parts)
        chunks.append(Chunk(text=text, token_count=count(text), metadata=metadata()))
        tail = _tail(parts[-1], overlap, count) if carry else ""
        last_page = pages[-1:] if pages else []
        parts = [tail] if tail else []
        pages = last_page if tail else []
        used = count(tail) if tail else 0

    for block in blocks:
        if block.kind == "heading":
            close(carry=False)
            headings = [(level, text) for level, text in headings if level < block.level]
            headings.append((block.level, block.text.strip()))
            continue
        # Pieces of a long paragraph leave room for the overlap carried into the chunk that holds them.
        for piece in _pieces(block.text.strip(), max(max_tokens - overlap, 1), count):
            tokens = count(piece)
            # Only a chunk with new text in it is worth closing (not one holding just the overlap).
            if used + tokens > max_tokens and used > 0:
                close(carry=True)
                if used + tokens > max_tokens:
                    parts, pages, used = [], [], 0
            parts.append(piece)
            if block.page is not None:
                pages.append(block.page)
            used += tokens
    close(carry=False)
    return chunks
