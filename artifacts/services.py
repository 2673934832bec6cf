"""Writes and byte access for artifacts: store bytes under a host-generated key with their sniffed MIME
type, sha256, size and expiry; read byte ranges and stream chunks in constant memory.

Storage keys are generated here (`artifact_storage_key`), never taken from a client or a runner, so no
request can name or overwrite another object's blob.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import IO

from django.conf import settings
from django.core.files.base import ContentFile, File
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.sniff import SNIFF_BYTES, mime_type_sniff
from artifacts.storage import artifact_storage
from bindings.models import Workspace
from transcripts.models import EventLog

STREAM_CHUNK_BYTES = 64 * 1024


def artifact_storage_key(*, workspace: Workspace, artifact_id: uuid.UUID, now: datetime) -> str:
    # Workspace first so a whole tenant can be listed or removed by prefix; the date spreads directories.
    return f"ws-{workspace.pk}/{now:%Y/%m/%d}/{artifact_id.hex}"


def _expiry(source: str, expires_at: datetime | None) -> datetime | None:
    if expires_at is not None:
        return expires_at
    ttl = settings.LANGBOT_ARTIFACT_RUNNER_TTL_SECONDS
    if source == Artifact.Source.RUNNER and ttl > 0:
        return timezone.now() + timedelta(seconds=ttl)
    return None


def artifact_create_from_bytes(
    *,
    workspace: Workspace,
    data: bytes,
    name: str,
    mime_type: str,
    conversation_id: str,
    source: str,
    event: EventLog | None = None,
    run_id: uuid.UUID | str | None = None,
    expires_at: datetime | None = None,
    artifact_id: uuid.UUID | None = None,
) -> Artifact:
    """Store `data` and record it. The blob is written before the row, so a row never points at nothing;
    a blob whose transaction later rolls back is an orphan for a cleanup sweep, never a dangling ref."""
    return artifact_create_from_chunks(
        workspace=workspace,
        chunks=[data],
        name=name,
        mime_type=mime_type,
        conversation_id=conversation_id,
        source=source,
        event=event,
        run_id=run_id,
        expires_at=expires_at,
        content=ContentFile(data),
        artifact_id=artifact_id,
    )


def artifact_create_from_file(
    *,
    workspace: Workspace,
    file: File[bytes],
    name: str,
    mime_type: str,
    conversation_id: str,
    source: str,
    expires_at: datetime | None = None,
) -> Artifact:
    """Store an uploaded file (read twice in chunks: once for sha256 and sniffing, once to store)."""
    file.seek(0)
    chunks = file.chunks(STREAM_CHUNK_BYTES)
    return artifact_create_from_chunks(
        workspace=workspace,
        chunks=chunks,
        name=name,
        mime_type=mime_type,
        conversation_id=conversation_id,
        source=source,
        expires_at=expires_at,
        content=file,
    )


def artifact_create_from_chunks(
    *,
    workspace: Workspace,
    chunks: Iterable[bytes],
    name: str,
    mime_type: str,
    conversation_id: str,
    source: str,
    content: File[bytes],
    event: EventLog | None = None,
    run_id: uuid.UUID | str | None = None,
    expires_at: datetime | None = None,
    artifact_id: uuid.UUID | None = None,
) -> Artifact:
    digest = hashlib.sha256()
    head = b""
    size = 0
    for chunk in chunks:
        if len(head) < SNIFF_BYTES:
            head += chunk[: SNIFF_BYTES - len(head)]
        digest.update(chunk)
        size += len(chunk)
    content.seek(0)
    # A caller may fix the id up front, e.g. to name the artifact in a run event written beside it.
    artifact_id = artifact_id or uuid.uuid4()
    key = artifact_storage_key(workspace=workspace, artifact_id=artifact_id, now=timezone.now())
    stored_key = artifact_storage().save(key, content)
    return Artifact.objects.create(
        artifact_id=artifact_id,
        workspace=workspace,
        conversation_id=conversation_id,
        run_id=run_id,
        event=event,
        name=name[:255],
        mime_type=mime_type_sniff(head, mime_type),
        size=size,
        sha256=digest.hexdigest(),
        storage_key=stored_key,
        source=source,
        expires_at=_expiry(source, expires_at),
    )


def artifact_upload_store(*, workspace_id: int, path: str) -> tuple[uuid.UUID, str]:
    """Put a runner's finished upload (a local file, already checked for size and sha256 as it arrived) into
    the artifact storage under a new host-generated key; returns the new artifact's id and the stored key.
    The row is `artifact_upload_record`'s, written after this: a row never points at nothing."""
    artifact_id = uuid.uuid4()
    key = artifact_storage_key(workspace=Workspace(pk=workspace_id), artifact_id=artifact_id, now=timezone.now())
    with open(path, "rb") as handle:
        stored_key = artifact_storage().save(key, File(handle))
    return artifact_id, stored_key


def artifact_upload_record(
    *,
    artifact_id: uuid.UUID,
    storage_key: str,
    workspace_id: int,
    name: str,
    mime_type: str,
    size: int,
    sha256: str,
    head: bytes,
    conversation_id: str,
    run_id: uuid.UUID | str,
) -> Artifact:
    """Record an upload `artifact_upload_store` stored, its type sniffed from `head` (`mime_type` is a hint)."""
    return Artifact.objects.create(
        artifact_id=artifact_id,
        workspace_id=workspace_id,
        conversation_id=conversation_id,
        run_id=run_id,
        name=name[:255],
        mime_type=mime_type_sniff(head, mime_type),
        size=size,
        sha256=sha256,
        storage_key=storage_key,
        source=Artifact.Source.RUNNER,
        expires_at=_expiry(Artifact.Source.RUNNER, None),
    )


def artifact_blob_delete(*, storage_key: str) -> None:
    artifact_storage().delete(storage_key)


def artifact_read_bytes(*, artifact: Artifact) -> bytes:
    with artifact_storage().open(artifact.storage_key, "rb") as handle:
        content: bytes = handle.read()
    return content


def artifact_read_range(*, artifact: Artifact, offset: int, length: int) -> bytes:
    """Up to `length` bytes from `offset` (fewer at the end; none at or past the end)."""
    if offset >= artifact.size or length <= 0:
        return b""
    with artifact_storage().open(artifact.storage_key, "rb") as handle:
        handle.seek(offset)
        data: bytes = handle.read(min(length, artifact.size - offset))
    return data


def artifact_open(*, artifact: Artifact) -> IO[bytes]:
    handle: IO[bytes] = artifact_storage().open(artifact.storage_key, "rb")
    return handle


def artifact_iter_range(
    *, artifact: Artifact, start: int, end: int, chunk_size: int = STREAM_CHUNK_BYTES
) -> Iterator[bytes]:
    """Bytes `start..end` (inclusive) in chunks of at most `chunk_size`: one chunk in memory at a time."""
    with artifact_open(artifact=artifact) as handle:
        handle.seek(start)
        left = end - start + 1
        while left > 0:
            chunk = handle.read(min(chunk_size, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk


def artifacts_bind_to_conversation(*, artifacts: Iterable[Artifact], conversation_id: str) -> None:
    """Attach unbound artifacts (uploads without a conversation) to the conversation of the event that
    first references them, so runs of that conversation may read them."""
    pks = [a.pk for a in artifacts if not a.conversation_id]
    if pks and conversation_id:
        Artifact.objects.filter(pk__in=pks, conversation_id="").update(conversation_id=conversation_id)
