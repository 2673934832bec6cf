"""`artifact_metadata`, `artifact_read` and `artifact_stream` (docs/state-storage-artifacts.md, "Artifacts").

A run reads an artifact only when it created it, when the artifact belongs to the run's conversation,
or when the snapshot grants it (`resources.artifacts`); anything else — another conversation's or
workspace's artifact, an expired one, a malformed id — answers `not_found`. `artifact_read` returns one
range, `length` 1 MiB by default and clamped to 10 MiB; reading at or past the end returns no bytes
with `eof`. `artifact_stream` sends `chunk_size` chunks (same default and cap) as `continue` frames,
reading one chunk at a time from storage, so memory stays constant whatever the artifact's size; the
last chunk has `eof`.

Uploads (`artifact_upload_open` / `_chunk` / `_finish` / `_abort`; docs/protocol.md, "Artifact uploads") are
held by the worker serving the run, whose run token every call carries: chunks are written to a local
temporary file as they arrive, checked against the workspace's limit (`artifacts.selectors.
runner_upload_max_bytes`), in order, with a running sha256 (`langbot_sdk.uploads`, the rules the fake host
shares). Only `finish` puts the bytes into the artifact storage, after the size and sha256 match, and the
row is written after the blob; so an upload abandoned mid-way never reaches the storage. Its temporary file
goes when it is aborted, refused, finished, idle for `UPLOAD_IDLE_SECONDS`, past its run's deadline, or
when the worker exits. An upload belongs to the run that opened it: any other run gets `not_found`.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import IO, Any

from artifacts.models import Artifact
from artifacts.selectors import artifact_for_run, runner_upload_max_bytes
from artifacts.services import (
    artifact_blob_delete,
    artifact_open,
    artifact_read_range,
    artifact_upload_record,
    artifact_upload_store,
)
from hostapi.base import FamilyHandler, HandlerResult, ProxyCall, not_found
from langbot_sdk.authorization import api_require, artifact_access
from langbot_sdk.protocol import (
    Action,
    AgentAPIException,
    ArtifactMetadata,
    ArtifactReadResult,
    ArtifactStreamChunk,
    ArtifactUploadOpened,
    ArtifactUploadProgress,
    ErrorCode,
    limits,
)
from langbot_sdk.uploads import UploadReceiver, upload_open_check

logger = logging.getLogger(__name__)

UPLOAD_IDLE_SECONDS = 300.0
"""An upload with no call for this long is dropped (its runner went away without aborting it)."""


def artifact_metadata_of(artifact: Artifact) -> ArtifactMetadata:
    return ArtifactMetadata(
        artifact_id=str(artifact.artifact_id),
        name=artifact.name or str(artifact.artifact_id),
        mime_type=artifact.mime_type,
        size=artifact.size,
        sha256=artifact.sha256 or None,
        created_at=artifact.created_at,
        expires_at=artifact.expires_at,
        conversation_id=artifact.conversation_id or None,
        run_id=str(artifact.run_id) if artifact.run_id else None,
        source=artifact.source,
    )


async def _artifact(call: ProxyCall, *, operation: str) -> Artifact:
    artifact_id = call.request.artifact_id
    session = call.session
    granted = artifact_access(session, artifact_id, operation=operation)
    artifact = await call.db(
        artifact_for_run,
        workspace_id=session.scope.workspace_id,
        artifact_id=artifact_id,
        run_id=session.run_id,
        conversation_id=session.scope.conversation_id,
        granted=granted,
    )
    if artifact is None:
        raise not_found(f"no artifact {artifact_id!r} in this run's scope", artifact_id=artifact_id)
    return artifact


async def artifact_metadata(call: ProxyCall) -> HandlerResult:
    artifact = await _artifact(call, operation="metadata")
    return artifact_metadata_of(artifact).model_dump(mode="json")


async def artifact_read(call: ProxyCall) -> HandlerResult:
    artifact = await _artifact(call, operation="read")
    offset, length = call.request.offset, call.request.length
    data = await asyncio.to_thread(artifact_read_range, artifact=artifact, offset=offset, length=length)
    result = ArtifactReadResult(
        artifact_id=str(artifact.artifact_id),
        offset=offset,
        length=len(data),
        data_base64=base64.b64encode(data).decode("ascii"),
        eof=offset + len(data) >= artifact.size,
        total_size=artifact.size,
    )
    return result.model_dump(mode="json")


async def artifact_stream(call: ProxyCall) -> HandlerResult:
    artifact = await _artifact(call, operation="read")
    return _chunks(artifact, call.request.offset, call.request.chunk_size)


def _read(handle: IO[bytes], size: int) -> bytes:
    return handle.read(size)


async def _chunks(artifact: Artifact, offset: int, chunk_size: int) -> AsyncIterator[dict[str, Any]]:
    artifact_id = str(artifact.artifact_id)
    if offset >= artifact.size:
        yield ArtifactStreamChunk(artifact_id=artifact_id, offset=artifact.size, data_base64="", eof=True).model_dump(
            mode="json"
        )
        return
    handle = await asyncio.to_thread(artifact_open, artifact=artifact)
    try:
        await asyncio.to_thread(handle.seek, offset)
        position = offset
        while position < artifact.size:
            data = await asyncio.to_thread(_read, handle, min(chunk_size, artifact.size - position))
            if not data:
                break
            eof = position + len(data) >= artifact.size
            yield ArtifactStreamChunk(
                artifact_id=artifact_id, offset=position, data_base64=base64.b64encode(data).decode("ascii"), eof=eof
            ).model_dump(mode="json")
            position += len(data)
    finally:
        await asyncio.to_thread(handle.close)


# --- uploads ----------------------------------------------------------------------------------------


@dataclass
class _Upload:
    receiver: UploadReceiver
    workspace_id: int
    conversation_id: str
    path: str
    handle: IO[bytes]
    deadline_at: float
    touched_at: float = field(default_factory=time.monotonic)
    busy: bool = False

    def stale(self, now_wall: float, now_mono: float) -> bool:
        return now_wall >= self.deadline_at or now_mono - self.touched_at >= UPLOAD_IDLE_SECONDS


# This worker's open uploads by id. Touched only from the worker's event loop; the file work is in threads.
_uploads: dict[str, _Upload] = {}


def _discard(upload: _Upload) -> None:
    """Close and remove an upload's temporary file (it never reached the artifact storage)."""
    with contextlib.suppress(OSError):
        upload.handle.close()
    with contextlib.suppress(OSError):
        os.unlink(upload.path)


def _drop(upload_id: str) -> None:
    upload = _uploads.pop(upload_id, None)
    if upload is not None:
        _discard(upload)


def uploads_sweep() -> int:
    """Drop the uploads past their run's deadline or idle too long; returns how many went."""
    now_wall, now_mono = time.time(), time.monotonic()
    stale = [key for key, upload in _uploads.items() if upload.stale(now_wall, now_mono) and not upload.busy]
    for key in stale:
        _drop(key)
    return len(stale)


@atexit.register
def _drop_all() -> None:
    for key in list(_uploads):
        _drop(key)


def _held(call: ProxyCall) -> tuple[str, _Upload]:
    upload_id = call.request.upload_id
    upload = _uploads.get(upload_id)
    # Another run's upload is as absent as one that never was.
    if upload is None or upload.receiver.run_id != call.session.run_id:
        raise not_found(f"no upload {upload_id!r} open for this run", upload_id=upload_id)
    if upload.busy:
        raise AgentAPIException.invalid_argument(
            "the previous call of this upload has not finished; send chunks one after another", upload_id=upload_id
        )
    upload.touched_at = time.monotonic()
    return upload_id, upload


async def artifact_upload_open(call: ProxyCall) -> HandlerResult:
    session, request = call.session, call.request
    # The grant frozen at the run's start (the limit was above 0 then); the limit is read again below,
    # so a workspace whose uploads were turned off since refuses too.
    api_require(session.available_apis.artifact_upload, "artifacts.upload")
    uploads_sweep()
    max_bytes = await call.db(runner_upload_max_bytes, workspace_id=session.scope.workspace_id)
    open_uploads = sum(1 for upload in _uploads.values() if upload.receiver.run_id == session.run_id)
    upload_open_check(max_bytes=max_bytes, declared_size=request.size, open_uploads=open_uploads)
    upload_id = uuid.uuid4().hex
    fd, path = await asyncio.to_thread(tempfile.mkstemp, prefix="langbot-upload-")
    _uploads[upload_id] = _Upload(
        receiver=UploadReceiver(
            upload_id=upload_id,
            run_id=session.run_id,
            name=request.name,
            mime_type=request.mime_type,
            max_bytes=max_bytes,
        ),
        workspace_id=session.scope.workspace_id,
        conversation_id=session.scope.conversation_id,
        path=path,
        handle=os.fdopen(fd, "wb"),
        deadline_at=call.deadline_at,
    )
    opened = ArtifactUploadOpened(
        upload_id=upload_id, max_bytes=max_bytes, chunk_max_bytes=limits.ARTIFACT_UPLOAD_CHUNK_MAX_BYTES
    )
    return opened.model_dump(mode="json")


async def artifact_upload_chunk(call: ProxyCall) -> HandlerResult:
    upload_id, upload = _held(call)
    data = base64.b64decode(call.request.data_base64)
    try:
        upload.receiver.accept(call.request.offset, data)
    except AgentAPIException as exc:
        if exc.code == ErrorCode.PAYLOAD_TOO_LARGE:
            _drop(upload_id)  # over the cap: what arrived can never be finished
        raise
    upload.busy = True
    try:
        await asyncio.to_thread(upload.handle.write, data)
    except BaseException:
        _drop(upload_id)
        raise
    finally:
        upload.busy = False
    return ArtifactUploadProgress(upload_id=upload_id, received=upload.receiver.received).model_dump(mode="json")


async def artifact_upload_finish(call: ProxyCall) -> HandlerResult:
    upload_id, upload = _held(call)
    # Whatever happens next the upload is over: a failed check cannot be fixed by sending more.
    del _uploads[upload_id]
    receiver = upload.receiver
    try:
        await asyncio.to_thread(upload.handle.close)
        receiver.finish_check(size=call.request.size, sha256=call.request.sha256)
        artifact_id, key = await asyncio.to_thread(
            artifact_upload_store, workspace_id=upload.workspace_id, path=upload.path
        )
        try:
            artifact = await call.db(
                artifact_upload_record,
                artifact_id=artifact_id,
                storage_key=key,
                workspace_id=upload.workspace_id,
                name=receiver.name,
                mime_type=receiver.mime_type,
                size=receiver.received,
                sha256=receiver.sha256,
                head=receiver.head,
                conversation_id=upload.conversation_id,
                run_id=receiver.run_id,
            )
        except BaseException:
            # No row, no blob: the stored bytes would be an orphan nobody can name.
            await asyncio.shield(asyncio.to_thread(artifact_blob_delete, storage_key=key))
            raise
    finally:
        _discard(upload)
    logger.info("run %s uploaded artifact %s (%d bytes)", receiver.run_id, artifact.artifact_id, artifact.size)
    return artifact_metadata_of(artifact).model_dump(mode="json")


async def artifact_upload_abort(call: ProxyCall) -> HandlerResult:
    upload_id, upload = _held(call)
    received = upload.receiver.received
    _drop(upload_id)
    return ArtifactUploadProgress(upload_id=upload_id, received=received, aborted=True).model_dump(mode="json")


HANDLERS: dict[Action, FamilyHandler] = {
    Action.ARTIFACT_METADATA: artifact_metadata,
    Action.ARTIFACT_READ: artifact_read,
    Action.ARTIFACT_STREAM: artifact_stream,
    Action.ARTIFACT_UPLOAD_OPEN: artifact_upload_open,
    Action.ARTIFACT_UPLOAD_CHUNK: artifact_upload_chunk,
    Action.ARTIFACT_UPLOAD_FINISH: artifact_upload_finish,
    Action.ARTIFACT_UPLOAD_ABORT: artifact_upload_abort,
}
