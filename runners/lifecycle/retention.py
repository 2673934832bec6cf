"""The retention sweep (issue 22): what the host keeps, for how long, and the daily pass that removes the
rest, workspace by workspace, in batches.

Kinds and their settings (days; 0 keeps forever), each overridable per workspace slug in
`LANGBOT_RETENTION_WORKSPACES` (`{"<slug>": {"artifact_days": 7, ...}}`):
- `artifact_days` (`LANGBOT_RETENTION_ARTIFACT_DAYS`, default 0): artifacts of any source older than that.
  Expired artifacts (`expires_at` passed; already invisible to API and runners) go in every case.
  Artifacts a live (queued or running) run may read — its own output or its event's input — and files of
  knowledge documents are kept whatever their age.
- `run_event_days` (`LANGBOT_RETENTION_RUN_EVENT_DAYS`, default 90): result events of runs that finished
  that long ago; the run row, its status, output and usage stay.
- `proxy_audit_days` (`LANGBOT_RETENTION_PROXY_AUDIT_DAYS`, default 90): proxy call audit rows.
- `inbound_refusal_days` (`LANGBOT_RETENTION_INBOUND_REFUSAL_DAYS`, default 30): counted refusals of inbound
  platform requests, by when they were last seen. The platforms app sits above this one, so it installs its
  purge here at start-up (`retention_purge_install`), as it installs the delivery port.
- `person_days` (`LANGBOT_RETENTION_PERSON_DAYS`, default 0): a person none of whose identities wrote for
  that long is erased as `POST /api/v1/persons/{id}/erase` would (the people app installs the purge).
- Orphan blobs (files in artifact storage no row names) older than
  `LANGBOT_RETENTION_ORPHAN_GRACE_HOURS` (default 24).
Each app removes its own data (`artifacts.retention`, this module for the run ledger and the audit) and
`transcripts.retention` records the counts, shown in admin (Transcripts › Retention purges).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from artifacts.retention import artifacts_purge, orphan_blobs_purge
from bindings.models import Workspace
from resources.models import KnowledgeDocument
from runners.models import ProxyCallAudit, Run, RunEvent
from transcripts.models import RetentionPurge
from transcripts.retention import retention_purges_record

logger = logging.getLogger(__name__)

Kind = RetentionPurge.Kind


@dataclass(frozen=True)
class RetentionPolicy:
    artifact_days: int
    run_event_days: int
    proxy_audit_days: int
    inbound_refusal_days: int
    person_days: int = 0


@dataclass(frozen=True)
class InstalledPurge:
    """A purge an app above this one installed: `purge(workspace_id=, before=, batch_size=)` removes the
    workspace's rows of `kind` older than `before` and returns how many; `days` reads its policy's days."""

    kind: str
    days: Callable[[RetentionPolicy], int]
    purge: Callable[..., int]


_installed_purges: dict[str, InstalledPurge] = {}


def retention_purge_install(*, kind: str, days: Callable[[RetentionPolicy], int], purge: Callable[..., int]) -> None:
    """Have the sweep run `purge` for each workspace too (called from an app's `ready`; again replaces)."""
    _installed_purges[kind] = InstalledPurge(kind=kind, days=days, purge=purge)


def retention_policy(*, workspace: Workspace | None) -> RetentionPolicy:
    """The settings' days, with the workspace's overrides from `LANGBOT_RETENTION_WORKSPACES` on top."""
    overrides: dict[str, Any] = {}
    if workspace is not None:
        overrides = dict(settings.LANGBOT_RETENTION_WORKSPACES.get(workspace.slug) or {})
    return RetentionPolicy(
        artifact_days=int(overrides.get("artifact_days", settings.LANGBOT_RETENTION_ARTIFACT_DAYS)),
        run_event_days=int(overrides.get("run_event_days", settings.LANGBOT_RETENTION_RUN_EVENT_DAYS)),
        proxy_audit_days=int(overrides.get("proxy_audit_days", settings.LANGBOT_RETENTION_PROXY_AUDIT_DAYS)),
        inbound_refusal_days=int(
            overrides.get("inbound_refusal_days", settings.LANGBOT_RETENTION_INBOUND_REFUSAL_DAYS)
        ),
        person_days=int(overrides.get("person_days", settings.LANGBOT_RETENTION_PERSON_DAYS)),
    )


def batched_delete(queryset: QuerySet[Any], batch_size: int) -> int:
    """Delete in primary-key batches: one short statement each, never one long lock over a big table."""
    deleted = 0
    model = queryset.model
    while True:
        ids = list(queryset.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        model._default_manager.filter(pk__in=ids).delete()
        deleted += len(ids)


def run_events_purge(*, workspace: Workspace, finished_before: datetime, batch_size: int) -> int:
    """Delete the result events of the workspace's runs that finished before `finished_before`."""
    ended = Run.objects.filter(
        workspace=workspace, status__in=Run.TERMINAL_STATUSES, finished_at__lt=finished_before
    ).values("pk")
    return batched_delete(RunEvent.objects.filter(run_id__in=ended), batch_size)


def proxy_audit_purge(*, workspace_id: int | None, before: datetime, batch_size: int) -> int:
    """Delete the audit rows of a workspace (None: the refusals no run could be named for) made before
    `before`."""
    return batched_delete(ProxyCallAudit.objects.filter(workspace_id=workspace_id, created_at__lt=before), batch_size)


def retention_sweep(*, now: datetime | None = None) -> list[RetentionPurge]:
    """Apply every workspace's retention, then remove orphan blobs; record and return what went."""
    started = now or timezone.now()
    batch = settings.LANGBOT_RETENTION_BATCH
    counts: dict[tuple[int | None, str], tuple[int, datetime]] = {}
    # Subqueries, not lists: a busy host has thousands of runs in flight.
    live = Run.objects.exclude(status__in=Run.TERMINAL_STATUSES)
    keep_run_ids = live.values_list("run_id", flat=True)
    keep_event_ids = live.values_list("event_id", flat=True)
    keep_artifact_ids = KnowledgeDocument.objects.filter(artifact__isnull=False).values_list("artifact_id", flat=True)
    for workspace in Workspace.objects.order_by("pk").iterator():
        policy = retention_policy(workspace=workspace)
        artifacts_before = _days_before(started, policy.artifact_days)
        counts[(workspace.pk, Kind.ARTIFACTS)] = (
            artifacts_purge(
                workspace=workspace,
                now=started,
                created_before=artifacts_before,
                keep_run_ids=keep_run_ids,
                keep_event_ids=keep_event_ids,
                keep_artifact_ids=keep_artifact_ids,
                batch_size=batch,
            ),
            artifacts_before or started,
        )
        if (events_before := _days_before(started, policy.run_event_days)) is not None:
            counts[(workspace.pk, Kind.RUN_EVENTS)] = (
                run_events_purge(workspace=workspace, finished_before=events_before, batch_size=batch),
                events_before,
            )
        if (audit_before := _days_before(started, policy.proxy_audit_days)) is not None:
            counts[(workspace.pk, Kind.PROXY_AUDIT)] = (
                proxy_audit_purge(workspace_id=workspace.pk, before=audit_before, batch_size=batch),
                audit_before,
            )
        for installed in _installed_purges.values():
            if (before := _days_before(started, installed.days(policy))) is not None:
                counts[(workspace.pk, installed.kind)] = (
                    installed.purge(workspace_id=workspace.pk, before=before, batch_size=batch),
                    before,
                )
    if (audit_before := _days_before(started, retention_policy(workspace=None).proxy_audit_days)) is not None:
        counts[(None, Kind.PROXY_AUDIT)] = (
            proxy_audit_purge(workspace_id=None, before=audit_before, batch_size=batch),
            audit_before,
        )
    orphans_before = started - timedelta(hours=settings.LANGBOT_RETENTION_ORPHAN_GRACE_HOURS)
    known = set(Workspace.objects.values_list("pk", flat=True))
    for workspace_id, count in orphan_blobs_purge(modified_before=orphans_before, batch_size=batch).items():
        owner = workspace_id if workspace_id in known else None
        previous = counts.get((owner, Kind.ORPHAN_BLOBS), (0, orphans_before))[0]
        counts[(owner, Kind.ORPHAN_BLOBS)] = (previous + count, orphans_before)
    recorded = retention_purges_record(sweep_started_at=started, counts=counts)
    logger.info("retention sweep: %s", ", ".join(f"{r.kind}={r.count}" for r in recorded) or "nothing to remove")
    return recorded


def _days_before(now: datetime, days: int) -> datetime | None:
    return now - timedelta(days=days) if days > 0 else None
