"""The document upload cap, enforced while the body is read: a request whose declared length is over it
is refused before any of it is parsed, and a body without a length (or a lying one) is refused as soon as
more than the cap has arrived, so a too-large upload never ends up stored — neither in memory nor on disk."""

from __future__ import annotations

from typing import Any

from django.core.files.uploadhandler import FileUploadHandler

# Room for the multipart framing and the small form fields beside the file.
MULTIPART_OVERHEAD_BYTES = 64 * 1024


class DocumentTooLargeError(Exception):
    def __init__(self, *, limit: int, size: int | None):
        super().__init__(f"The document is larger than the limit of {limit} bytes.")
        self.limit = limit
        self.size = size


def declared_length_check(meta: dict[str, Any], *, limit: int) -> None:
    """Refuse a request whose Content-Length alone says the file cannot fit."""
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return
    if length > limit + MULTIPART_OVERHEAD_BYTES:
        raise DocumentTooLargeError(limit=limit, size=length)


class UploadLimitHandler(FileUploadHandler):
    """First in the chain: counts the file bytes as they stream in and stops the parse past the cap."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.received = 0

    def handle_raw_input(self, input_data: Any, meta: dict[str, Any], content_length: int, boundary: str,
                         encoding: str | None = None) -> None:  # fmt: skip
        declared_length_check(meta, limit=self.limit)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            raise DocumentTooLargeError(limit=self.limit, size=None)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None
