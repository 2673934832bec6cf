"""The rules of an artifact upload (`artifact_upload_open` / `_chunk` / `_finish` / `_abort`; docs/protocol.md,
"Artifact uploads"), in one place for both hosts: the real host's handlers (`hostapi.artifacts`) and the fake host
of `langbot_sdk.testing` each keep their own bytes, but both hold them to these checks, so an upload refused by
one is refused by the other with the same error code.

What belongs here: the size cap, in-order chunks, the final size and sha256 check, the cap on uploads a run
keeps open, and the sniffing head every receiver keeps. Where the bytes go is the caller's business.
"""

from __future__ import annotations

import hashlib
import hmac

from langbot_sdk.protocol import AgentAPIException, limits

__all__ = ["SNIFF_HEAD_BYTES", "UploadReceiver", "upload_open_check"]

SNIFF_HEAD_BYTES = 512
"""How much of the content's start a receiver keeps to sniff its type."""


def upload_open_check(*, max_bytes: int, declared_size: int | None, open_uploads: int) -> None:
    """Refuse an `artifact_upload_open` the host would refuse: uploads turned off for the workspace
    (`unauthorized`), a declared size over the cap (`payload_too_large`), too many open uploads for the run
    (`rate_limited`, retryable once one finishes)."""
    if max_bytes <= 0:
        raise AgentAPIException.unauthorized("artifact uploads are turned off for this workspace")
    if declared_size is not None and declared_size > max_bytes:
        raise AgentAPIException.payload_too_large(
            f"the upload is {declared_size} bytes; this workspace's limit is {max_bytes}", limit=max_bytes
        )
    if open_uploads >= limits.ARTIFACT_UPLOADS_OPEN_MAX:
        raise AgentAPIException.rate_limited(
            f"this run already has {open_uploads} uploads open; finish or abort one first",
            limit=limits.ARTIFACT_UPLOADS_OPEN_MAX,
        )


class UploadReceiver:
    """What a receiver knows of one upload: who opened it, how much arrived, its running sha256 and head."""

    def __init__(self, *, upload_id: str, run_id: str, name: str, mime_type: str, max_bytes: int) -> None:
        self.upload_id = upload_id
        self.run_id = run_id
        self.name = name
        self.mime_type = mime_type
        self.max_bytes = max_bytes
        self.received = 0
        self.head = b""
        self._digest = hashlib.sha256()

    def accept(self, offset: int, data: bytes) -> None:
        """Check that `data` is the next chunk and within the cap, then count it (the caller stores it).
        Raises `invalid_argument` for a chunk out of order (naming the offset expected) and
        `payload_too_large` past the cap (after which the caller drops the upload)."""
        if offset != self.received:
            raise AgentAPIException.invalid_argument(
                f"the next chunk of this upload starts at offset {self.received}, not {offset}",
                field="offset",
                expected_offset=self.received,
            )
        if self.received + len(data) > self.max_bytes:
            raise AgentAPIException.payload_too_large(
                f"the upload would exceed this workspace's limit of {self.max_bytes} bytes", limit=self.max_bytes
            )
        if len(self.head) < SNIFF_HEAD_BYTES:
            self.head += data[: SNIFF_HEAD_BYTES - len(self.head)]
        self._digest.update(data)
        self.received += len(data)

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def finish_check(self, *, size: int, sha256: str) -> None:
        """The sender's size and sha256 must be what arrived (`invalid_argument` otherwise; the upload is
        dropped either way by the caller, since the bytes cannot be trusted)."""
        if size != self.received:
            raise AgentAPIException.invalid_argument(
                f"the upload says {size} bytes but {self.received} arrived", field="size", received=self.received
            )
        if not hmac.compare_digest(sha256, self.sha256):
            raise AgentAPIException.invalid_argument(
                "the upload's sha256 does not match the bytes received", field="sha256", received_sha256=self.sha256
            )
