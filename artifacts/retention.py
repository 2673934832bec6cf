"""Retention of artifacts (issue 22): what the daily sweep (`runners.lifecycle.retention`) asks of this app.

- Expired artifacts (`expires_at` passed; the API and the proxy already treat them as gone) and, when the
  workspace keeps artifacts for a number of days, artifacts older than that: rows deleted in batches, each
  batch's blobs deleted once its transaction has committed. A blob whose deletion fails is left for the
  orphan pass, never a row pointing at no blob.
- Artifacts a live run may still read are kept whatever their age: the caller names those runs and their
  events (this app does not know runs).
- Orphan blobs: files in artifact storage that no row names, older than a grace period — written by a
  transaction that rolled back after the blob was saved (the blob is written before its row,
  `artifacts.services`). Younger ones may belong to a transaction still open.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import partial

from django.core.files.storage import Storage
from django.db import transaction
from django.db.models import Q

from artifacts.models import Artifact
from artifacts.storage import artifact_storage
from bindings.models import Workspace

logger = logging.getLogger(__name__)


def artifacts_purge(
    *,
    workspace: Workspace,
    now: datetime,
    created_before: datetime | None,
    keep_run_ids: Iterable[uuid.UUID | None],
    keep_event_ids: Iterable[int | None],
    keep_artifact_ids: Iterable[int | None],
    batch_size: int,
) -> int:
    """Delete the workspace's expired artifacts, and those created before `created_before` when given,
    except those of the given (live) runs and events and the given rows (e.g. a knowledge document's file;
    each may be a subquery); returns how many rows went."""
    due = Q(expires_at__lte=now)
    if created_before is not None:
        due |= Q(created_at__lt=created_before)
    candidates = (
        Artifact.objects.filter(due, workspace=workspace)
        .exclude(run_id__in=keep_run_ids)
        .exclude(event_id__in=keep_event_ids)
        .exclude(pk__in=keep_artifact_ids)
        .order_by("pk")
    )
    deleted = 0
    while True:
        batch = list(candidates.values_list("pk", "storage_key")[:batch_size])
        if not batch:
            return deleted
        with transaction.atomic():
            Artifact.objects.filter(pk__in=[pk for pk, _ in batch]).delete()
            keys = [key for _, key in batch]
            transaction.on_commit(partial(_blobs_delete, keys))
        deleted += len(batch)


def orphan_blobs_purge(*, modified_before: datetime, batch_size: int) -> dict[int | None, int]:
    """Delete the blobs no artifact row names that were last written before `modified_before`; returns
    how many went per workspace id (read from the key's `ws-<id>/` prefix; None outside every prefix)."""
    storage = artifact_storage()
    deleted: dict[int | None, int] = {}
    batch: list[str] = []
    for key in _blob_keys(storage, ""):
        batch.append(key)
        if len(batch) >= batch_size:
            _orphans_delete(storage, batch, modified_before, deleted)
            batch = []
    if batch:
        _orphans_delete(storage, batch, modified_before, deleted)
    return deleted


def _workspace_of(key: str) -> int | None:
    head = key.split("/", 1)[0]
    return int(head[3:]) if head.startswith("ws-") and head[3:].isdigit() else None


def _orphans_delete(
    storage: Storage, keys: list[str], modified_before: datetime, deleted: dict[int | None, int]
) -> None:
    named = set(Artifact.objects.filter(storage_key__in=keys).values_list("storage_key", flat=True))
    for key in keys:
        if key in named:
            continue
        try:
            if storage.get_modified_time(key) >= modified_before:
                continue
            storage.delete(key)
        except (OSError, NotImplementedError):
            logger.warning("orphan blob %s could not be checked or deleted; next sweep retries", key, exc_info=True)
            continue
        workspace_id = _workspace_of(key)
        deleted[workspace_id] = deleted.get(workspace_id, 0) + 1


def _blob_keys(storage: Storage, directory: str) -> Iterator[str]:
    try:
        directories, files = storage.listdir(directory)
    except FileNotFoundError:
        return
    for name in files:
        yield f"{directory}/{name}" if directory else name
    for name in directories:
        yield from _blob_keys(storage, f"{directory}/{name}" if directory else name)


def _blobs_delete(keys: list[str]) -> None:
    storage = artifact_storage()
    for key in keys:
        try:
            storage.delete(key)
        except OSError:
            logger.warning("artifact blob %s could not be deleted; the orphan sweep retries", key, exc_info=True)
