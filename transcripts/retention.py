"""The retention sweep's record (issue 22): one `RetentionPurge` row per kind and workspace that lost
something, written here so that the sweep (`runners.lifecycle.retention`) never writes this app's rows
itself."""

from __future__ import annotations

from datetime import datetime

from transcripts.models import RetentionPurge


def retention_purges_record(
    *, sweep_started_at: datetime, counts: dict[tuple[int | None, str], tuple[int, datetime]]
) -> list[RetentionPurge]:
    """Record `(workspace id, kind) → (count, cutoff)`; kinds that removed nothing are not recorded."""
    rows = [
        RetentionPurge(
            sweep_started_at=sweep_started_at, workspace_id=workspace_id, kind=kind, count=count, cutoff=cutoff
        )
        for (workspace_id, kind), (count, cutoff) in sorted(
            counts.items(), key=lambda item: (item[0][0] or 0, item[0][1])
        )
        if count > 0
    ]
    return RetentionPurge.objects.bulk_create(rows)
