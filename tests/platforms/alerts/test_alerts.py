"""Alerts (issue 34, item 5): each kind is raised once while its condition holds and resolved once when it
stops, with an `alert.raised` / `alert.resolved` completion-webhook message each; two evaluators at once
raise one alert; each workspace's thresholds are its own; the REST list and the admin's dashboard show them."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from bindings.models import Bot
from platforms.alerts import evaluator
from platforms.alerts.evaluator import alerts_evaluate
from platforms.alerts.models import Alert, AlertSettings
from platforms.connectors import connection_status_set
from platforms.models import PlatformDelivery
from platforms.webhooks.models import WebhookDelivery
from runners.models import ProxyCallAudit, Run
from tests.factories import AgentBindingFactory, BotFactory, ModelFactory, WebhookEndpointFactory, WorkspaceFactory
from tests.platforms.webhooks.conftest import make_run, send_due

pytestmark = pytest.mark.django_db

ALERT_EVENTS = ["alert.raised", "alert.resolved"]


def _messages(workspace) -> list[tuple[str, str, str]]:
    """(event type, kind, subject) of every alert message recorded for the workspace, oldest first."""
    rows = WebhookDelivery.objects.filter(workspace=workspace, event_type__in=ALERT_EVENTS).order_by("id")
    return [(d.event_type, d.payload["data"]["kind"], d.payload["data"]["subject"]) for d in rows]


def _twice(now=None) -> None:
    alerts_evaluate(now=now)
    alerts_evaluate(now=now)


def _assert_raised_then_resolved(workspace, kind: str, subject: str, *, resolve, now=None, later=None) -> Alert:
    WebhookEndpointFactory.create(workspace=workspace, event_types=ALERT_EVENTS)
    _twice(now)
    [alert] = Alert.objects.filter(workspace=workspace)
    assert (alert.kind, alert.subject, alert.state) == (kind, subject, "raised")
    assert _messages(workspace) == [("alert.raised", kind, subject)]
    resolve()
    _twice(later or now)
    alert.refresh_from_db()
    assert alert.state == "resolved"
    assert alert.resolved_at is not None
    assert _messages(workspace) == [("alert.raised", kind, subject), ("alert.resolved", kind, subject)]
    return alert


@pytest.fixture
def connector_bot(workspace):
    bot = BotFactory.create(workspace=workspace, platform=Bot.Platform.DISCORD, bot_id="support")
    yield bot
    connection_status_set(bot_pk=bot.pk, state="stopped", ttl=1)


def test_a_bot_whose_connection_is_down_is_raised_once_and_resolved_once_when_it_reconnects(workspace, connector_bot):
    connection_status_set(bot_pk=connector_bot.pk, state="backoff", detail="401 Unauthorized")
    alert = _assert_raised_then_resolved(
        workspace,
        "bot.connection",
        "support",
        resolve=lambda: connection_status_set(bot_pk=connector_bot.pk, state="connected"),
    )
    assert alert.details["detail"] == "401 Unauthorized"


def test_a_bot_whose_last_deliveries_all_failed_is_raised_until_one_gets_through(workspace):
    bot = BotFactory.create(workspace=workspace, bot_id="tg")
    run = make_run(workspace, status=Run.Status.COMPLETED)

    def deliver(status: str) -> None:
        PlatformDelivery.objects.create(
            workspace=workspace, run=run, bot=bot, platform=bot.platform, status=status, error={"code": "forbidden"}
        )

    for _ in range(3):
        deliver(PlatformDelivery.Status.FAILED)
    alert = _assert_raised_then_resolved(
        workspace, "bot.deliveries", "tg", resolve=lambda: deliver(PlatformDelivery.Status.DELIVERED)
    )
    assert alert.details["last_error"] == {"code": "forbidden"}


def _end(run: Run, status: str, at) -> None:
    Run.objects.filter(pk=run.pk).update(status=status, finished_at=at)


def test_a_binding_whose_failure_rate_passes_the_threshold_is_raised_and_resolved_as_runs_succeed(workspace):
    binding = AgentBindingFactory.create(workspace=workspace, binding_id="helpdesk", concurrency_policy="parallel")
    now = timezone.now()
    for i in range(10):
        _end(make_run(workspace, binding=binding), "failed" if i % 2 else "completed", now - timedelta(minutes=30 - i))

    def succeed_more() -> None:
        for i in range(6):
            _end(make_run(workspace, binding=binding), "completed", now - timedelta(minutes=5 - i))

    alert = _assert_raised_then_resolved(workspace, "binding.failure_rate", "helpdesk", resolve=succeed_more)
    assert (alert.details["failed"], alert.details["runs"]) == (5, 10)


def test_an_endpoint_of_another_binding_gets_no_message_of_this_bindings_alert(workspace):
    binding = AgentBindingFactory.create(workspace=workspace, binding_id="helpdesk", concurrency_policy="parallel")
    other = AgentBindingFactory.create(workspace=workspace, binding_id="other")
    mine = WebhookEndpointFactory.create(workspace=workspace, event_types=ALERT_EVENTS, binding=binding)
    theirs = WebhookEndpointFactory.create(workspace=workspace, event_types=ALERT_EVENTS, binding=other)
    for _ in range(10):
        _end(make_run(workspace, binding=binding), "failed", timezone.now())
    alerts_evaluate()
    assert WebhookDelivery.objects.filter(endpoint=mine).count() == 1
    assert not WebhookDelivery.objects.filter(endpoint=theirs).exists()


def test_a_queue_whose_oldest_run_waits_too_long_is_raised_and_resolved_once_it_runs(workspace):
    run = make_run(workspace)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=6))
    alert = _assert_raised_then_resolved(
        workspace, "queue.wait", "queue", resolve=lambda: Run.objects.filter(pk=run.pk).update(status="running")
    )
    assert alert.details["waited_seconds"] >= 360


def test_a_model_provider_answering_errors_is_raised_and_resolved_when_the_window_passes(workspace):
    model = ModelFactory.create(workspace=workspace, provider__workspace=workspace, provider__provider_id="openai")
    now = timezone.now()
    for outcome in ["runtime_error", "runtime_error", "rate_limited", "runtime_error", "deadline_exceeded", "ok"]:
        ProxyCallAudit.objects.create(
            run_id="r", workspace_id=workspace.pk, action="invoke_llm", resource=f"model_id={model.model_id}",
            outcome=outcome, created_at=now - timedelta(minutes=1),
        )  # fmt: skip
    alert = _assert_raised_then_resolved(
        workspace, "provider.errors", "openai", resolve=lambda: None, now=now, later=now + timedelta(minutes=10)
    )
    assert alert.details["errors"] == 5


def test_the_receiver_gets_the_signed_alert_message(workspace, receiver):
    endpoint = WebhookEndpointFactory.create(workspace=workspace, url=receiver.url, event_types=ALERT_EVENTS)
    run = make_run(workspace)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    alerts_evaluate()
    [delivery] = send_due(endpoint)
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    [received] = receiver.requests
    Webhook(endpoint.secret).verify(received["body"], received["headers"])
    body = json.loads(received["body"])
    assert body["type"] == "alert.raised"
    assert (body["data"]["kind"], body["data"]["state"]) == ("queue.wait", "raised")


def test_two_evaluators_at_once_raise_one_alert_and_resolve_it_once(workspace, monkeypatch):
    WebhookEndpointFactory.create(workspace=workspace, event_types=ALERT_EVENTS)
    run = make_run(workspace)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    real = evaluator.conditions_of
    interleaved = {"done": False}

    def other_evaluator_first(*args, **kwargs):
        # The second evaluator runs its whole pass between this one's read of the open alerts and its writes.
        if not interleaved["done"]:
            interleaved["done"] = True
            alerts_evaluate()
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluator, "conditions_of", other_evaluator_first)
    alerts_evaluate()
    assert Alert.objects.filter(workspace=workspace).count() == 1
    assert _messages(workspace) == [("alert.raised", "queue.wait", "queue")]

    Run.objects.filter(pk=run.pk).update(status="running")
    interleaved["done"] = False
    alerts_evaluate()
    assert Alert.objects.get(workspace=workspace).state == "resolved"
    assert _messages(workspace) == [("alert.raised", "queue.wait", "queue"), ("alert.resolved", "queue.wait", "queue")]


def test_each_workspace_has_its_own_thresholds(workspace):
    patient = WorkspaceFactory.create(slug="patient")
    AlertSettings.objects.create(workspace=patient, queue_wait_seconds=3600)
    quiet = WorkspaceFactory.create(slug="quiet")
    AlertSettings.objects.create(workspace=quiet, enabled=False)
    for ws in (workspace, patient, quiet):
        run = make_run(ws)
        Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=10))
    alerts_evaluate()
    assert list(Alert.objects.values_list("workspace__slug", flat=True)) == [workspace.slug]


def test_the_rest_list_shows_the_callers_workspace_only(workspace, api_client):
    other = WorkspaceFactory.create(slug="other")
    for ws in (workspace, other):
        run = make_run(ws)
        Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    alerts_evaluate()
    answer = api_client.get("/api/v1/alerts")
    assert answer.status_code == 200
    [item] = answer.json()["items"]
    assert (item["kind"], item["subject"], item["state"]) == ("queue.wait", "queue", "raised")
    assert api_client.get("/api/v1/alerts?state=resolved").json()["items"] == []
    bad = api_client.get("/api/v1/alerts?state=open")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_argument"


def test_the_dashboard_and_the_admin_list_show_open_alerts(workspace, admin_client):
    run = make_run(workspace)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    alerts_evaluate()
    page = admin_client.get("/admin/").content.decode()
    assert "Open alert" in page
    assert "queue waiting" in page
    listing = admin_client.get("/admin/alerts/alert/").content.decode()
    assert "queue waiting" in listing


EVALUATORS = 6


@pytest.mark.postgres  # SQLite serializes writers, so concurrent inserts never race
@pytest.mark.django_db(transaction=True)
def test_evaluators_running_at_once_in_threads_raise_one_alert_and_resolve_it_once():
    workspace = WorkspaceFactory.create()
    WebhookEndpointFactory.create(workspace=workspace, event_types=ALERT_EVENTS)
    run = make_run(workspace)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))

    def all_at_once() -> None:
        start = threading.Barrier(EVALUATORS)

        def evaluate(_: int) -> None:
            try:
                start.wait()
                alerts_evaluate(workspaces=[workspace])
            finally:
                connections.close_all()

        with ThreadPoolExecutor(EVALUATORS) as pool:
            list(pool.map(evaluate, range(EVALUATORS)))

    all_at_once()
    assert Alert.objects.filter(workspace=workspace).count() == 1
    Run.objects.filter(pk=run.pk).update(status="running")
    all_at_once()
    assert Alert.objects.get(workspace=workspace).state == "resolved"
    assert _messages(workspace) == [("alert.raised", "queue.wait", "queue"), ("alert.resolved", "queue.wait", "queue")]
