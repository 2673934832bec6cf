"""One rule for run-end observers, whichever way a run ends (the worker's finish, its failure or cancel, a
queued run cancelled, a run that failed before starting, a rejected run, a lost lease): an observer of the
outbox kind runs inside the transaction that ends the run and sees the end there, so its rows commit with
the end or not at all; an observer that talks to the outside runs only once the end has committed.

Real transactions (`transaction=True`), on PostgreSQL and on SQLite (`DATABASE_URL`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection, transaction
from django.utils import timezone

from foundation.ports import Observers
from platforms.webhooks.models import WebhookDelivery
from platforms.webhooks.outbox import subscribed_workspaces_forget
from runners.lifecycle.observers import run_end_observers
from runners.lifecycle.services import run_cancel_request, run_create, runs_sweep
from runners.models import Run
from runners.orchestrator import ledger
from runners.orchestrator.admission import run_claim
from runners.orchestrator.ledger import Batch, LeaseLostError
from runners.orchestrator.normalizer import Outcome
from runners.sql import RunEnd
from tests.factories import AgentBindingFactory, WebhookEndpointFactory
from tests.platforms.webhooks.conftest import make_run
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Seen:
    """What the probes saw, in the order they ran."""

    calls: list[str] = field(default_factory=list)
    in_transaction: list[bool] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    outbox_rows: list[int] = field(default_factory=list)


@pytest.fixture
def seen() -> Iterator[Seen]:
    """Two probes beside the webhooks' outbox observer: one of the outbox kind, one that talks outside."""
    subscribed_workspaces_forget()
    seen = Seen()

    def probe(kind: str) -> Callable[[Sequence[Run]], None]:
        def observe(runs: Sequence[Run]) -> None:
            [run] = runs
            seen.calls.append(kind)
            seen.in_transaction.append(connection.in_atomic_block)
            seen.statuses.append(Run.objects.get(pk=run.pk).status)
            seen.outbox_rows.append(WebhookDelivery.objects.filter(run_id=run.run_id).count())

        return observe

    inside, outside = probe("inside"), probe("outside")
    run_end_observers.register(inside)
    run_end_observers.register(outside, after_commit=True)
    yield seen
    run_end_observers.unregister(inside)
    run_end_observers.unregister(outside)
    subscribed_workspaces_forget()


def _executor() -> Any:
    return SimpleNamespace(executor=lambda fn, **kwargs: sync_to_async(fn)(**kwargs), native=False)


def _running(workspace) -> Run:
    run = make_run(workspace, status=Run.Status.RUNNING)
    token = uuid.uuid4()
    Run.objects.filter(pk=run.pk).update(lease_token=token, lease_expires_at=timezone.now() + timedelta(minutes=1))
    run.lease_token = token
    return run


def _worker_ends(workspace, status: str) -> Run:
    run = _running(workspace)
    error = None if status == Run.Status.COMPLETED else {"code": "runner.error", "message": "x", "retryable": False}
    outcome = Outcome(status=status, status_reason="", error=error, usage={})
    async_to_sync(ledger.ledger_finish)(
        _executor(), run=run, lease_token=str(run.lease_token), last_seq=0,
        batch=Batch(events=[("message.completed", {"text": "done"})]), outcome=outcome, output="done", reply=None,
    )  # fmt: skip
    return run


def _queued_cancelled(workspace) -> Run:
    run = make_run(workspace)
    run_cancel_request(run=run, reason="stop")
    return run


def _failed_before_starting(workspace) -> Run:
    run = make_run(workspace)  # its runner is in no catalog
    assert run_claim(run_id=str(run.run_id), owner="test", lease_seconds=10) is None
    return run


def _rejected(workspace) -> Run:
    binding = AgentBindingFactory.create(workspace=workspace, concurrency_policy="reject")
    make_run(workspace, binding=binding)
    with transaction.atomic():
        return run_create(event=make_run(workspace, binding=binding).event, binding=binding, observer=False)


def _lease_swept(workspace) -> Run:
    run = _running(workspace)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    runs_sweep()
    return run


WAYS: dict[str, Callable[[Any], Run]] = {
    "worker finishes": lambda workspace: _worker_ends(workspace, Run.Status.COMPLETED),
    "worker fails": lambda workspace: _worker_ends(workspace, Run.Status.FAILED),
    "worker cancels": lambda workspace: _worker_ends(workspace, Run.Status.CANCELLED),
    "queued run cancelled": _queued_cancelled,
    "fails before starting": _failed_before_starting,
    "rejected": _rejected,
    "lease swept": _lease_swept,
}


@pytest.mark.parametrize("way", list(WAYS))
def test_the_outbox_sees_the_end_in_its_transaction_and_the_outside_only_after_commit(workspace, seen, way):
    # given an endpoint subscribed to every run end
    WebhookEndpointFactory.create(workspace=workspace)
    # when a run ends this way
    run = WAYS[way](workspace)
    # then the outbox-kind observer ran in the ending transaction, saw the run ended and the outbox row
    # written there; the outside one ran after it, outside any transaction, once both had committed
    ended = Run.objects.get(pk=run.pk)
    assert ended.status in Run.TERMINAL_STATUSES
    assert seen.calls == ["inside", "outside"]
    assert seen.in_transaction == [True, False]
    assert seen.statuses == [ended.status, ended.status]
    assert seen.outbox_rows == [1, 1]
    assert WebhookDelivery.objects.filter(run_id=run.run_id).count() == 1


def _prepared(workspace, way: str) -> Run:
    run = _running(workspace)
    if way == "cancelled":
        Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED)
    elif way == "lease swept":
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    return run


def _end(run: Run, way: str) -> None:
    if way == "worker finishes":
        end = RunEnd(status=Run.Status.COMPLETED, status_reason="", error=None, usage={}, output="done")
        now = timezone.now()
        ledger._ledger_write(run=run, lease_token=str(run.lease_token), last_seq=0, batch=Batch(), now=now, end=end)
    elif way == "cancelled":
        run_cancel_request(run=run, reason="stop")
    else:
        runs_sweep()


def _end_then_fail(run: Run, way: str) -> None:
    with transaction.atomic():
        _end(run, way)
        raise RuntimeError("the transaction fails after the end")


@pytest.mark.parametrize("way", ["worker finishes", "cancelled", "lease swept"])
def test_when_the_ending_transaction_rolls_back_the_outbox_row_goes_with_it_and_the_outside_hears_nothing(
    workspace, seen, way
):
    # given an endpoint and a run about to end
    WebhookEndpointFactory.create(workspace=workspace)
    run = _prepared(workspace, way)
    before = Run.objects.get(pk=run.pk).status
    # when it ends inside a transaction that then fails
    with pytest.raises(RuntimeError, match="fails after the end"):
        _end_then_fail(run, way)
    # then the run has not ended, no outbox row is left, and only the outbox-kind observer had run (inside)
    assert Run.objects.get(pk=run.pk).status == before
    assert not WebhookDelivery.objects.exists()
    assert seen.calls == ["inside"]
    assert seen.in_transaction == [True]


def test_a_failing_outbox_kind_observer_undoes_only_its_own_rows(workspace, seen):
    # given an endpoint and an observer of the outbox kind that writes a row and then fails
    WebhookEndpointFactory.create(workspace=workspace)

    def broken(runs: Sequence[Run]) -> None:
        EventLog.objects.create(workspace=workspace, event_id="written-by-broken", event_type="x", source="api")
        raise RuntimeError("observer bug")

    run_end_observers.register(broken)
    try:
        run = _worker_ends(workspace, Run.Status.COMPLETED)
    finally:
        run_end_observers.unregister(broken)
    # then its row is gone, the run ended, the outbox row committed and the outside heard of it
    assert not EventLog.objects.filter(event_id="written-by-broken").exists()
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    assert WebhookDelivery.objects.filter(run_id=run.run_id).count() == 1
    assert seen.calls == ["inside", "outside"]


def test_a_worker_that_lost_its_lease_writes_nothing_and_no_observer_hears_of_it(workspace, seen):
    # given a running run whose lease another worker now holds, and an endpoint
    WebhookEndpointFactory.create(workspace=workspace)
    run = _running(workspace)
    Run.objects.filter(pk=run.pk).update(lease_token=uuid.uuid4())
    # when the old worker tries to end it
    with pytest.raises(LeaseLostError):
        _worker_ends_with(run)
    # then the run still runs, and nobody was told
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING
    assert not WebhookDelivery.objects.exists()
    assert seen.calls == []


def _worker_ends_with(run: Run) -> None:
    outcome = Outcome(status=Run.Status.COMPLETED, status_reason="", error=None, usage={})
    async_to_sync(ledger.ledger_finish)(
        _executor(), run=run, lease_token=str(run.lease_token), last_seq=0,
        batch=Batch(events=[("message.completed", {"text": "done"})]), outcome=outcome, output="done", reply=None,
    )  # fmt: skip


def test_an_after_commit_observer_that_fails_keeps_the_others_running():
    # given two after-commit observers of a port, the first one failing
    port: Observers[int] = Observers("test")
    heard: list[Sequence[int]] = []

    def broken(items: Sequence[int]) -> None:
        raise RuntimeError("outside is down")

    port.register(broken, after_commit=True)
    port.register(heard.append, after_commit=True)
    # when a transaction that notifies them commits
    with transaction.atomic():
        port.notify([1, 2])
        assert heard == []
    # then the second one heard, once
    assert heard == [(1, 2)]
