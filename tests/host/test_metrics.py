"""`GET /metrics`: who may read it, the Prometheus text it answers, the run counts it reads from the
database, and the counters, histograms and log context the host's code feeds (in this process; the same
through a real worker: tests/integration/test_metrics_worker.py)."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from django.conf import settings
from django.test import Client
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

from foundation.log_context import RunContextFilter, log_context
from runners.access.audit import AuditLog
from runners.live.publish import run_events_publish_committed
from runners.models import Run, RunEvent
from runtimes.metrics import RUNTIME_CONNECTED
from tests.factories import UserFactory, WorkspaceFactory
from tests.streaming.conftest import make_run

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-scrape-token"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, keyed by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(client: Client | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = (client or Client()).get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    return samples(response.content.decode())


def process_samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What the processes wrote to the metrics directory, without the database's run counts (for tests
    running on an event loop)."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=settings.PROMETHEUS_MULTIPROC_DIR)
    return samples(generate_latest(registry).decode())


@pytest.fixture
def metrics_token(settings):
    settings.LANGBOT_METRICS_TOKEN = TOKEN


def test_without_a_token_setting_metrics_are_not_found_except_for_superusers(settings, client):
    settings.LANGBOT_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", headers={"Authorization": "Bearer anything"}).status_code == 404
    client.force_login(UserFactory.create(is_staff=True))
    assert client.get("/metrics").status_code == 404
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))
    assert client.get("/metrics").status_code == 200


def test_with_a_token_setting_a_scrape_needs_that_bearer_token(metrics_token, client):
    missing = client.get("/metrics")
    wrong = client.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    basic = client.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"})
    right = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})

    for refused in (missing, wrong, basic):
        assert refused.status_code == 401
        assert refused["WWW-Authenticate"].startswith("Bearer")
    assert right.status_code == 200
    assert right["Content-Type"].startswith("text/plain; version=0.0.4")
    assert client.post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


def test_the_answer_is_prometheus_text_with_help_and_type_lines(metrics_token, client):
    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode()

    assert "# HELP langbot_runs Runs in each status" in text
    assert "# TYPE langbot_runs gauge" in text
    names = {family.name for family in text_string_to_metric_families(text)}
    assert "langbot_runs" in names


def test_runs_by_status_and_runner_are_counted_from_the_database_with_zeros_for_other_statuses(metrics_token):
    workspace = WorkspaceFactory.create()
    for status in (Run.Status.QUEUED, Run.Status.COMPLETED, Run.Status.COMPLETED, Run.Status.FAILED):
        make_run(workspace, status=status)
    runner = str(Run.objects.filter(workspace=workspace).values_list("runner_id", flat=True).first())

    values = scrape()

    def runs(status: str) -> float:
        return values[("langbot_runs", (("runner", runner), ("status", status)))]

    assert (runs("queued"), runs("completed"), runs("failed")) == (1, 2, 1)
    assert (runs("running"), runs("cancelled"), runs("timeout")) == (0, 0, 0)


async def test_each_audited_proxy_call_counts_by_action_and_outcome(metrics_token):
    action = f"test.metrics-{uuid.uuid4().hex[:8]}"

    async def database(function, **kwargs):
        return None

    audit = AuditLog(database)
    for outcome in ("ok", "ok", "permission_denied"):
        audit.record(
            run_id="r", runner_id="x", workspace_id=None, action=action, resource="", scope="", caller="",
            outcome=outcome, duration_ms=1.0,
        )  # fmt: skip
    await audit.flush()

    values = process_samples()
    assert values[("langbot_proxy_calls_total", (("action", action), ("outcome", "ok")))] == 2
    assert values[("langbot_proxy_calls_total", (("action", action), ("outcome", "permission_denied")))] == 1


async def test_a_publication_observes_its_wait_in_the_publish_lag_histogram():
    # given a persisted run event (as the ledger hands it over: the rows themselves are not read again)
    run = Run(run_id=uuid.uuid4(), workspace_id=1, conversation_id="conv-1")
    rows = [RunEvent(id=1, run=run, seq=1, type="message.delta", data={"chunk": {"content": "hi"}})]
    before = process_samples().get(("langbot_stream_publish_lag_seconds_count", (("stream", "run"),)), 0)

    # when it is published
    await run_events_publish_committed(run=run, events=rows)
    await asyncio.sleep(0)  # the histogram is observed by the publication's done callback

    # then its wait in the publication queue was observed once
    assert process_samples()[("langbot_stream_publish_lag_seconds_count", (("stream", "run"),))] == before + 1


def test_the_runtime_connection_state_of_this_process_is_reported_by_pid(metrics_token):
    import os

    RUNTIME_CONNECTED.set(1)
    values = scrape()
    assert values[("langbot_runtime_connected", (("pid", str(os.getpid())),))] == 1


def test_records_logged_inside_a_run_carry_its_id_and_workspace_and_others_a_dash(caplog):
    logger = logging.getLogger("tests.metrics.run")
    run_filter = RunContextFilter()
    caplog.handler.addFilter(run_filter)
    try:
        with caplog.at_level(logging.INFO, logger="tests.metrics.run"):
            with log_context(run_id="run-123", workspace="acme"):
                logger.info("inside")
            logger.info("outside")
    finally:
        caplog.handler.removeFilter(run_filter)

    inside, outside = caplog.records
    assert (inside.run_id, inside.workspace) == ("run-123", "acme")
    assert (outside.run_id, outside.workspace) == ("-", "-")


def test_the_log_format_names_the_run_and_workspace(settings):
    assert "%(run_id)s" in settings.LOGGING["formatters"]["plain"]["format"]
    assert "%(workspace)s" in settings.LOGGING["formatters"]["plain"]["format"]
    assert "run" in settings.LOGGING["handlers"]["console"]["filters"]
