"""`artifact_metadata`, `artifact_read` and `artifact_stream` (docs/state-storage-artifacts.md, "Artifacts").

A run reads an artifact only when it created it, when the artifact belongs to the run's conversation,
or when the snapshot grants it (`resources.artifacts`); anything else — another conversation's or
workspace's artifact, an expired one, a malformed id — answers `not_found`. `artifact_read` returns one
range, `length` 1 MiB by default and clamped to 10 MiB; reading at or past the end returns no bytes
with `eof`. `artifact_stream` sends `chunk_size` chunks (same default and cap) as `continue` frames,
reading one chunk at a time from storage, so memory stays constant whatever the artifact's size; the
last chunk has `eof`.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import IO, Any

from artifacts.models import Artifact
from artifacts.selectors import artifact_for_run
from artifacts.services import artifact_open, artifact_read_range
from hostapi.base import FamilyHandler, HandlerResult, ProxyCall, not_found
from langbot_sdk.authorization import artifact_access
from langbot_sdk.protocol import Action, ArtifactMetadata, ArtifactReadResult, ArtifactStreamChunk


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


HANDLERS: dict[Action, FamilyHandler] = {
    Action.ARTIFACT_METADATA: artifact_metadata,
    Action.ARTIFACT_READ: artifact_read,
    Action.ARTIFACT_STREAM: artifact_stream,
}
