"""The retention of person data (README "People"): a person none of whose identities wrote for the workspace's
`person_days` (`LANGBOT_RETENTION_PERSON_DAYS`, overridable per workspace in `LANGBOT_RETENTION_WORKSPACES`)
is erased as an operator's erasure would, audited as `retention`. Run by the daily sweep
(`runners.lifecycle.retention`), which this app installs its purge into."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from people.data import person_erase
from people.models import Person, PersonAudit


def people_purge(*, workspace_id: int, before: datetime, batch_size: int) -> int:
    """Erase the workspace's persons last seen before `before` (never seen: made before it); how many."""
    stale = Person.objects.filter(
        Q(last_seen_at__lt=before) | Q(last_seen_at__isnull=True, created_at__lt=before), workspace_id=workspace_id
    ).order_by("pk")
    erased = 0
    while batch := list(stale[:batch_size]):
        for person in batch:
            person_erase(person, by="retention sweep", action=PersonAudit.Action.RETENTION)
            erased += 1
    return erased
