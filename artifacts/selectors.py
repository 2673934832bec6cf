"""Reads for artifacts, always scoped to a workspace."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from artifacts.models import Artifact
from bindings.models import Workspace


def artifact_get(*, workspace: Workspace, artifact_id: str) -> Artifact | None:
    """The workspace's artifact, or None — also for a malformed id or another workspace's artifact."""
    try:
        public_id = uuid.UUID(str(artifact_id))
    except ValueError:
        return None
    return Artifact.objects.filter(workspace=workspace, artifact_id=public_id).first()


def artifacts_by_id(*, workspace: Workspace, artifact_ids: Iterable[str]) -> dict[str, Artifact]:
    """The workspace's artifacts among `artifact_ids`, keyed by the id as given; unknown ids are absent."""
    wanted: dict[uuid.UUID, str] = {}
    for given in artifact_ids:
        try:
            wanted[uuid.UUID(str(given))] = given
        except ValueError:
            continue
    if not wanted:
        return {}
    found = Artifact.objects.filter(workspace=workspace, artifact_id__in=list(wanted))
    return {wanted[a.artifact_id]: a for a in found}
