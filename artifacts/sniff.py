"""MIME type sniffing from an artifact's first bytes. The type a client or runner declares is a hint:
content with a recognisable signature is labelled by its signature (a PNG sent as `text/html` is stored
as `image/png`), so a stored type never makes a browser or a runner treat bytes as something else."""

from __future__ import annotations

import re

SNIFF_BYTES = 512
OCTET_STREAM = "application/octet-stream"

_SIGNATURES: list[tuple[bytes, int, str]] = [
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"%PDF-", 0, "application/pdf"),
    (b"PK\x03\x04", 0, "application/zip"),
    (b"\x1f\x8b", 0, "application/gzip"),
    (b"BM", 0, "image/bmp"),
    (b"OggS", 0, "audio/ogg"),
    (b"ID3", 0, "audio/mpeg"),
    (b"fLaC", 0, "audio/flac"),
    (b"\x1aE\xdf\xa3", 0, "video/webm"),
    (b"ftyp", 4, "video/mp4"),
    (b"7z\xbc\xaf\x27\x1c", 0, "application/x-7z-compressed"),
]
_MIME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")


def _signature(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    for magic, offset, mime in _SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            return mime
    return None


def _looks_like_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut at the end of the sniffed head is still text.
        return exc.start >= len(head) - 3
    return True


def mime_type_sniff(head: bytes, declared: str | None = None) -> str:
    """The type to store for content starting with `head` (up to `SNIFF_BYTES`), given a declared type."""
    found = _signature(head)
    if found is not None:
        return found
    hint = (declared or "").split(";")[0].strip().lower()
    valid_hint = bool(_MIME_PATTERN.match(hint)) and hint != OCTET_STREAM
    if _looks_like_text(head):
        if valid_hint and (hint.startswith("text/") or hint.endswith(("json", "xml", "yaml", "javascript", "csv"))):
            return hint
        stripped = head.lstrip()
        if stripped[:1] in (b"{", b"[") and not valid_hint:
            return "application/json"
        return hint if valid_hint and not hint.startswith(("image/", "audio/", "video/")) else "text/plain"
    if valid_hint and not hint.startswith("text/"):
        return hint
    return OCTET_STREAM
