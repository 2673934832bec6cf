"""Every way a run ends records its webhook message with the run end (the outbox), for the endpoints that
subscribed to it — and an observer that fails never undoes a run end."""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from platforms.webhooks import outbox
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from platforms.webhooks.outbox import deliveries_record, run_ends_reconcile
from platforms.webhooks.services import webhook_endpoint_create
from platforms.webhooks.specs import WebhookEndpointIn
from runners.lifecycle import observers
from runners.lifecycle.services import run_cancel_request, run_create, runs_sweep
from runners.models import Run
from runners.orchestrator import ledger
from runners.orchestrator.admission import run_claim
from runners.orchestrator.ledger import Batch
from runners.orchestrator.normalizer import Outcome
from tests.factories import AgentBindingFactory, WebhookEndpointFactory
from tests.platforms.webhooks.conftest import make_run

pytestmark = pytest.mark.django_db


def _messages() -> list[tuple[str, str, str]]:
    rows = WebhookDelivery.objects.order_by("id").values_list("event_type", "payload", "run_id")
    return [(kind, payload["data"]["status_reason"], str(run_id)) for kind, payload, run_id in rows]


def test_a_run_rejected_by_a_busy_conversation_sends_run_failed(workspace):
    # given a `reject` binding whose conversation has an active run, and an endpoint
    WebhookEndpointFactory.create(workspace=workspace)
    binding = AgentBindingFactory.create(workspace=workspace, concurrency_policy="reject")
    busy = make_run(workspace, binding=binding)
    # when another message arrives in the conversation
    rejected = run_create(event=make_run(workspace, binding=binding).event, binding=binding, observer=False)
    # then its refusal is a run.failed message
    assert busy.status == Run.Status.QUEUED
    assert _messages()[-1] == ("run.failed", "rejected", str(rejected.run_id))


def test_a_run_whose_worker_was_lost_sends_run_failed(workspace):
    # given a running run whose lease expired, and an endpoint
    WebhookEndpointFactory.create(workspace=workspace)
    run = make_run(workspace, status=Run.Status.RUNNING)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    # when the sweeper runs
    runs_sweep()
    # then the run failed with worker_lost, and its message says so
    assert _messages() == [("run.failed", "worker_lost", str(run.run_id))]
    assert WebhookDelivery.objects.get().payload["data"]["error"]["code"] == "worker_lost"


def test_a_run_whose_runner_is_gone_sends_run_failed_when_a_worker_picks_it(workspace):
    # given a queued run of a runner the catalog does not know, and an endpoint
    WebhookEndpointFactory.create(workspace=workspace)
    run = make_run(workspace)
    # when a worker tries to claim it
    assert run_claim(run_id=str(run.run_id), owner="test", lease_seconds=10) is None
    # then it failed before starting, with a message
    assert _messages() == [("run.failed", "runner.not_found", str(run.run_id))]


def test_a_cancelled_queued_run_sends_run_cancelled_once(workspace):
    WebhookEndpointFactory.create(workspace=workspace)
    run = make_run(workspace)
    run_cancel_request(run=run, reason="changed my mind")
    run_cancel_request(run=run, reason="again")
    # the message is recorded once even if the run end is reported again
    deliveries_record(runs=[Run.objects.get(pk=run.pk)])
    assert _messages() == [("run.cancelled", "changed my mind", str(run.run_id))]


def test_only_the_subscribed_endpoints_of_the_runs_workspace_and_binding_get_the_message(workspace):
    # given endpoints: all events, failures only, another binding only, and one in another workspace
    everything = WebhookEndpointFactory.create(workspace=workspace)
    WebhookEndpointFactory.create(workspace=workspace, event_types=["run.failed"])
    WebhookEndpointFactory.create(workspace=workspace, binding=AgentBindingFactory.create(workspace=workspace))
    WebhookEndpointFactory.create()
    mine = AgentBindingFactory.create(workspace=workspace, concurrency_policy="parallel")
    same_binding = WebhookEndpointFactory.create(workspace=workspace, binding=mine)
    # when a run of `mine` is cancelled
    run_cancel_request(run=make_run(workspace, binding=mine), reason="stop")
    # then only the workspace-wide endpoint for every event and the endpoint of that binding have a message
    assert set(WebhookDelivery.objects.values_list("endpoint_id", flat=True)) == {everything.pk, same_binding.pk}


def test_a_failing_observer_does_not_undo_the_run_end(workspace):
    # given an observer that raises, registered beside the webhooks' one
    WebhookEndpointFactory.create(workspace=workspace)

    def broken(runs):
        raise RuntimeError("observer bug")

    observers.run_end_observer_register(broken)
    run = make_run(workspace)
    # when the run is cancelled
    try:
        run_cancel_request(run=run, reason="stop")
    finally:
        observers.run_end_observers.unregister(broken)
    # then it is cancelled, and the other observer still recorded its message
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert _messages() == [("run.cancelled", "stop", str(run.run_id))]


@pytest.mark.parametrize(
    ("status", "event_type"),
    [("completed", "run.completed"), ("timeout", "run.failed"), ("cancelled", "run.cancelled")],
)
def test_a_run_the_worker_finishes_sends_its_end(workspace, status, event_type):
    # given a running run held by a worker's lease, and an endpoint
    WebhookEndpointFactory.create(workspace=workspace)
    run = make_run(workspace, status=Run.Status.RUNNING)
    token = uuid.uuid4()
    Run.objects.filter(pk=run.pk).update(lease_token=token)
    run.lease_token = token
    # when the worker writes its end
    statements: Any = SimpleNamespace(executor=lambda fn, **kwargs: sync_to_async(fn)(**kwargs))
    outcome = Outcome(status=status, status_reason="", error=None, usage={"host": {"calls": 0}})
    async_to_sync(ledger.ledger_finish)(
        statements, run=run, lease_token=str(token), last_seq=0, batch=Batch(events=[]), outcome=outcome,
        output="the answer", reply=None,
    )  # fmt: skip
    # then its message carries the final status and output
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.event_type == event_type
    assert delivery.payload["data"]["status"] == status
    assert delivery.payload["data"]["output"] == "the answer"
    assert delivery.payload["data"]["finished_at"] is not None


def _endpoint_made_earlier(workspace, event_types: list[str]) -> WebhookEndpoint:
    """An endpoint made through the service (its reconciliation starts after the newest run), ten minutes ago."""
    spec = WebhookEndpointIn(url="https://example.invalid/h", event_types=event_types)
    endpoint, _ = webhook_endpoint_create(workspace=workspace, spec=spec)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(created_at=timezone.now() - timedelta(minutes=10))
    return endpoint


def _end_silently(run: Run, *, ago: timedelta = timedelta(minutes=1)) -> None:
    """End a run as a worker that died right after its run-end statement would: no observer told."""
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED, finished_at=timezone.now() - ago)


def test_a_run_end_no_observer_reported_is_recorded_by_the_reconciliation_once(workspace):
    # given an endpoint, and a run that ended without its observers being told (the worker died)
    endpoint = _endpoint_made_earlier(workspace, ["run.completed"])
    run = make_run(workspace, status=Run.Status.RUNNING)
    _end_silently(run)
    # when the reconciliation runs twice
    first, second = run_ends_reconcile(), run_ends_reconcile()
    # then the message was recorded once
    assert (first, second) == (1, 0)
    assert _messages() == [("run.completed", "", str(run.run_id))]
    endpoint.refresh_from_db()
    assert endpoint.runs_checked_through == run.pk


def test_the_reconciliation_waits_for_active_runs_and_skips_none_after_them(workspace):
    # given an endpoint, a run still going and a later one that ended silently
    _endpoint_made_earlier(workspace, ["run.completed"])
    long_run = make_run(workspace, status=Run.Status.RUNNING)
    later = make_run(workspace, status=Run.Status.RUNNING)
    _end_silently(later)
    # when it runs while the first run is active, and again once it has ended
    while_active = run_ends_reconcile()
    _end_silently(long_run)
    after = run_ends_reconcile()
    # then nothing was recorded at first, both afterwards
    assert while_active == 0
    assert after == 2
    assert {run_id for _, _, run_id in _messages()} == {str(long_run.run_id), str(later.run_id)}


def test_the_reconciliation_leaves_reported_runs_and_runs_older_than_the_endpoint_alone(workspace):
    # given a run that ended before the endpoint existed, and one whose end was reported as usual
    old = make_run(workspace, status=Run.Status.RUNNING)
    _end_silently(old, ago=timedelta(hours=1))
    webhook_endpoint_create(
        workspace=workspace, spec=WebhookEndpointIn(url="https://example.invalid/h", event_types=["run.cancelled"])
    )
    reported = make_run(workspace)
    run_cancel_request(run=reported, reason="stop")
    Run.objects.filter(pk=reported.pk).update(finished_at=timezone.now() - timedelta(minutes=1))
    # when the reconciliation runs
    recorded = run_ends_reconcile()
    # then it recorded nothing more
    assert recorded == 0
    assert _messages() == [("run.cancelled", "stop", str(reported.run_id))]


def test_one_reconciliation_pass_catches_up_over_several_batches(workspace, monkeypatch):
    # given five runs that ended silently, checked two at a time
    monkeypatch.setattr(outbox, "RECONCILE_BATCH", 2)
    _endpoint_made_earlier(workspace, ["run.completed"])
    runs = [make_run(workspace, status=Run.Status.RUNNING) for _ in range(5)]
    for run in runs:
        _end_silently(run)
    # when the reconciliation runs once
    recorded = run_ends_reconcile()
    # then every one of them has its message
    assert recorded == 5
    assert {run_id for _, _, run_id in _messages()} == {str(r.run_id) for r in runs}
