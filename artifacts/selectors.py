"""Reads for artifacts, always scoped to a workspace; expired artifacts are never found."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from artifacts.models import Artifact, WorkspaceArtifactSettings
from bindings.models import Workspace


def _live(queryset: QuerySet[Artifact]) -> QuerySet[Artifact]:
    return queryset.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))


def _public_id(artifact_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(artifact_id))
    except ValueError:
        return None


def artifact_get(*, workspace: Workspace, artifact_id: str) -> Artifact | None:
    """The workspace's live artifact, or None — also for a malformed id, another workspace's artifact or
    an expired one."""
    public_id = _public_id(artifact_id)
    if public_id is None:
        return None
    return _live(Artifact.objects.filter(workspace=workspace, artifact_id=public_id)).first()


def artifacts_by_id(*, workspace: Workspace, artifact_ids: Iterable[str]) -> dict[str, Artifact]:
    """The workspace's live artifacts among `artifact_ids`, keyed by the id as given; unknown ids are absent."""
    wanted: dict[uuid.UUID, str] = {}
    for given in artifact_ids:
        public_id = _public_id(given)
        if public_id is not None:
            wanted[public_id] = given
    if not wanted:
        return {}
    found = _live(Artifact.objects.filter(workspace=workspace, artifact_id__in=list(wanted)))
    return {wanted[a.artifact_id]: a for a in found}


def artifact_for_run(
    *, workspace_id: int, artifact_id: str, run_id: str, conversation_id: str, granted: Iterable[str] = ()
) -> Artifact | None:
    """The artifact a run may read: in its workspace, live, and created by this run, or belonging to the
    run's conversation, or granted to the run explicitly (`resources.artifacts`). Otherwise None."""
    public_id = _public_id(artifact_id)
    if public_id is None:
        return None
    artifact = _live(Artifact.objects.filter(workspace_id=workspace_id, artifact_id=public_id)).first()
    if artifact is None:
        return None
    if artifact.run_id is not None and str(artifact.run_id) == run_id:
        return artifact
    if conversation_id and artifact.conversation_id == conversation_id:
        return artifact
    if artifact_id in set(granted):
        return artifact
    return None


def runner_upload_max_bytes(*, workspace_id: int) -> int:
    """The largest artifact a run of this workspace may upload: its own setting, else the host's default."""
    chosen = (
        WorkspaceArtifactSettings.objects.filter(workspace_id=workspace_id)
        .values_list("runner_upload_max_bytes", flat=True)
        .first()
    )
    if chosen is not None:
        return int(chosen)
    return int(settings.LANGBOT_ARTIFACT_RUNNER_UPLOAD_MAX_BYTES)
