"""MIME type sniffing from an artifact's first bytes. The type a client or runner declares is a hint:
content with a recognisable signature is labelled by its signature (a PNG sent as `text/html` is stored
as `image/png`), so a stored type never makes a browser or a runner treat bytes as something else. The
signatures are the `filetype` library's."""

from __future__ import annotations

import re

import filetype

SNIFF_BYTES = 512
OCTET_STREAM = "application/octet-stream"

_MIME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")


# filetype names a few types by their old `x-` names; stored types keep the registered ones.
_REGISTERED_NAMES = {"audio/x-flac": "audio/flac", "audio/x-wav": "audio/wav"}


def _signature(head: bytes) -> str | None:
    # filetype knows the magic numbers of images, audio, video, archives and documents; it reads at most
    # the first 261 bytes, well inside `SNIFF_BYTES`.
    found: str | None = filetype.guess_mime(head)
    return _REGISTERED_NAMES.get(found, found) if found else None


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
