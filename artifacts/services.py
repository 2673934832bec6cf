"""Writes for artifacts: store bytes under a host-generated key and record their metadata."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime

from django.core.files.base import ContentFile
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.storage import artifact_storage
from bindings.models import Workspace
from transcripts.models import EventLog


def artifact_storage_key(*, workspace: Workspace, artifact_id: uuid.UUID, now: datetime) -> str:
    # Workspace first so a whole tenant can be listed or removed by prefix; the date spreads directories.
    return f"ws-{workspace.pk}/{now:%Y/%m/%d}/{artifact_id.hex}"


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
) -> Artifact:
    """Store `data` and record it. The blob is written before the row, so a row never points at nothing;
    a blob whose transaction later rolls back is an orphan for a cleanup sweep, never a dangling ref."""
    artifact_id = uuid.uuid4()
    key = artifact_storage_key(workspace=workspace, artifact_id=artifact_id, now=timezone.now())
    stored_key = artifact_storage().save(key, ContentFile(data))
    return Artifact.objects.create(
        artifact_id=artifact_id,
        workspace=workspace,
        conversation_id=conversation_id,
        run_id=run_id,
        event=event,
        name=name[:255],
        mime_type=mime_type or "application/octet-stream",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        storage_key=stored_key,
        source=source,
    )


def artifact_read_bytes(*, artifact: Artifact) -> bytes:
    with artifact_storage().open(artifact.storage_key, "rb") as handle:
        content: bytes = handle.read()
    return content
