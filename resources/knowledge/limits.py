"""The bounds every document parser works within, and the checks that hold a document to them.

An upload is capped at its compressed size; what it expands to is bounded here: the bytes a zip-based
format (DOCX) unpacks to, its entry count and compression ratio — checked against the central directory
before any part is read, then against the bytes that actually come out of each entry, since a zip's
declared sizes can lie — the pages of a PDF, and the characters extracted from any document. A document
over a bound fails with a `LimitExceededError` whose message names the bound and the setting that moves it.

Nothing here reads Django settings: the parse child imports this module without configuring Django, and
the worker hands it the numbers (`ParseLimits`).
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import asdict, dataclass
from typing import Any

MiB = 1024**2
# Small parts (styles, settings, relationships) compress far better than prose, and are harmless at any ratio.
RATIO_FLOOR_BYTES = MiB
# Decompression proceeds in steps of at most this many output bytes, so a check never trails by more.
_STEP = 256 * 1024
_LOCAL_HEADER = struct.Struct("<4s22xHH")
_LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"


class LimitExceededError(Exception):
    """The document is over one of the bounds; the message names it and its setting."""


@dataclass(frozen=True)
class ParseLimits:
    max_expanded_bytes: int = 64 * MiB
    max_zip_entries: int = 1000
    max_compression_ratio: int = 100
    max_pdf_pages: int = 2000
    max_characters: int = 10_000_000

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def size_text(n: int) -> str:
    """A byte count as a limit's message gives it: whole MiB when it is one, else bytes."""
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n:,} bytes"


class TextBudget:
    """Counts the characters a parser extracts and stops it once they pass `max_characters`."""

    def __init__(self, limits: ParseLimits) -> None:
        self.limit = limits.max_characters
        self.used = 0

    def take(self, text: str) -> str:
        self.used += len(text)
        if self.used > self.limit:
            raise LimitExceededError(
                f"The document holds more than {self.limit:,} characters of text (LANGBOT_KB_MAX_CHARACTERS)."
            )
        return text


def zip_archive_check(archive: zipfile.ZipFile, *, data: bytes, limits: ParseLimits, kind: str) -> None:
    """Hold a zip-based document to the limits before a library reads it: first what its central directory
    declares, then what each entry really inflates to, counted in bounded steps without keeping the output.

    Only stored and deflated entries are accepted (what office applications write), so that every entry can be
    measured; another method, or an entry that cannot be found or inflated, raises `zipfile.BadZipFile`."""
    entries = archive.infolist()
    if len(entries) > limits.max_zip_entries:
        raise LimitExceededError(
            f"The {kind} holds {len(entries):,} files, more than {limits.max_zip_entries:,} "
            "(LANGBOT_KB_MAX_ZIP_ENTRIES)."
        )
    declared = 0
    for entry in entries:
        if entry.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise zipfile.BadZipFile(
                f"{entry.filename} uses compression method {entry.compress_type}, which this host does not read"
            )
        declared += entry.file_size
        _check_entry(entry, expanded=entry.file_size, total=declared, limits=limits)
    actual = 0
    for entry in entries:
        if entry.compress_type == zipfile.ZIP_STORED:
            actual += entry.compress_size
            _check_entry(entry, expanded=entry.compress_size, total=actual, limits=limits)
            continue
        actual += _inflated_size(entry, data=data, before=actual, limits=limits)


def _check_entry(entry: zipfile.ZipInfo, *, expanded: int, total: int, limits: ParseLimits) -> None:
    bound = size_text(limits.max_expanded_bytes)
    if expanded > limits.max_expanded_bytes:
        raise LimitExceededError(f"{entry.filename} expands to more than {bound} (LANGBOT_KB_MAX_EXPANDED_BYTES).")
    if total > limits.max_expanded_bytes:
        raise LimitExceededError(
            f"The document's files expand to more than {bound} in all, the last "
            f"counted being {entry.filename} (LANGBOT_KB_MAX_EXPANDED_BYTES)."
        )
    if expanded > RATIO_FLOOR_BYTES and expanded > limits.max_compression_ratio * max(entry.compress_size, 1):
        raise LimitExceededError(
            f"{entry.filename} expands more than {limits.max_compression_ratio} times its compressed size "
            "(LANGBOT_KB_MAX_COMPRESSION_RATIO)."
        )


def _inflated_size(entry: zipfile.ZipInfo, *, data: bytes, before: int, limits: ParseLimits) -> int:
    """The bytes a deflated entry really inflates to, checked against the limits as they come out."""
    start = entry.header_offset
    header = data[start : start + _LOCAL_HEADER.size]
    if len(header) < _LOCAL_HEADER.size:
        raise zipfile.BadZipFile(f"{entry.filename} is missing from the archive")
    signature, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    if signature != _LOCAL_HEADER_SIGNATURE:
        raise zipfile.BadZipFile(f"{entry.filename} has no local header")
    # The same span of compressed bytes zipfile itself would inflate: after the local header, compress_size long.
    offset = start + _LOCAL_HEADER.size + name_length + extra_length
    compressed = memoryview(data)[offset : offset + entry.compress_size]
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    produced = 0
    try:
        for at in range(0, len(compressed), _STEP):
            pending: bytes | memoryview = compressed[at : at + _STEP]
            while pending and not inflater.eof:
                produced += len(inflater.decompress(pending, _STEP))
                pending = inflater.unconsumed_tail
                _check_entry(entry, expanded=produced, total=before + produced, limits=limits)
            if inflater.eof:
                break
        # Output zlib still holds once the input is consumed comes out in the same bounded steps.
        while not inflater.eof and (tail := inflater.decompress(b"", _STEP)):
            produced += len(tail)
            _check_entry(entry, expanded=produced, total=before + produced, limits=limits)
    except zlib.error as exc:
        raise zipfile.BadZipFile(f"{entry.filename} cannot be inflated ({exc})") from exc
    return produced
