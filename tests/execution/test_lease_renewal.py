"""The worker's lease renewal (`runners.orchestrator.ledger.leases_renew`): every run it still holds gets a new
expiry and says whether a cancel was asked for; a run another worker now holds, or that has ended, is missing
from the answer (the worker then stops it as lost) and keeps its row as it was."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from runners.models import Run
from runners.orchestrator.ledger import leases_renew
from tests.factories import WorkspaceFactory, running_run

pytestmark = pytest.mark.django_db


def test_held_runs_are_renewed_and_runs_held_elsewhere_or_ended_are_missing():
    workspace = WorkspaceFactory.create()
    held, cancelled, taken, ended = (running_run(workspace, f"c{i}") for i in range(4))
    Run.objects.filter(pk=cancelled.pk).update(cancel_requested_at=timezone.now(), cancel_reason="user")
    Run.objects.filter(pk=ended.pk).update(status=Run.Status.COMPLETED)
    before = timezone.now()

    answer = leases_renew(
        tokens={
            held.pk: str(held.lease_token),
            cancelled.pk: str(cancelled.lease_token),
            taken.pk: str(uuid.uuid4()),  # the sweeper gave it to another worker
            ended.pk: str(ended.lease_token),
        },
        lease_seconds=30,
    )

    assert answer == {held.pk: (False, ""), cancelled.pk: (True, "user")}
    expiries = dict(Run.objects.values_list("pk", "lease_expires_at"))
    for renewed in (held.pk, cancelled.pk):
        expiry = expiries[renewed]
        assert expiry is not None
        assert expiry >= before + timedelta(seconds=29)
    assert expiries[taken.pk] is None
    assert expiries[ended.pk] is None
