"""A run through a real worker shows in `/metrics` — its status from the database, its queue wait and
duration, its proxy calls, its publications and the worker's runtime connection from the worker's own
metric files — and the worker's log lines of the run name the run and its workspace."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from runners.models import Run
from tests.processes import QA_RUNNER_ID, WorkerProcess, post_message, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "metrics-scrape-token"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def metrics_worker(start_worker, settings, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A worker of its own, on a queue of its own, writing its metrics to a directory of its own, which
    `/metrics` of this process reads (so runs of other workers and test sessions do not count)."""
    from langbot_host.celery import app

    directory = tmp_path / "metrics"
    directory.mkdir()
    queue = f"langbot-test-metrics-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    worker = start_worker(CELERY_TASK_DEFAULT_QUEUE=queue, PROMETHEUS_MULTIPROC_DIR=str(directory))
    app.conf.task_default_queue = queue
    settings.PROMETHEUS_MULTIPROC_DIR = str(directory)
    settings.LANGBOT_METRICS_TOKEN = TOKEN
    yield worker
    app.conf.task_default_queue = previous
    worker.stop()


def scrape() -> Samples:
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_a_run_with_proxy_calls_shows_in_the_metrics_and_its_log_lines_name_it(metrics_worker, qa_binding):
    # given a qa-runner binding
    binding = qa_binding()

    # when a message asks it to call every proxy API once
    run = wait_terminal(post_message(binding, "qa:proxy go"), timeout=60)

    # then the run is counted by status from the database
    assert run.status == Run.Status.COMPLETED, run.error
    report = json.loads(run.output)
    values = scrape()
    assert values[("langbot_runs", (("runner", QA_RUNNER_ID), ("status", "completed")))] >= 1
    # and the worker observed its queue wait and its duration, by runner (and final status)
    assert values[("langbot_run_queue_wait_seconds_count", (("runner", QA_RUNNER_ID),))] == 1
    duration = ("langbot_run_duration_seconds", (("runner", QA_RUNNER_ID), ("status", "completed")))
    assert values[(f"{duration[0]}_count", duration[1])] == 1
    assert 0 < values[(f"{duration[0]}_sum", duration[1])] < 60
    # and counted each proxy call the host served, by action and outcome (the SDK refuses some calls
    # before they leave the runtime: those never reach the host)
    calls = {labels: value for (name, labels), value in values.items() if name == "langbot_proxy_calls_total"}
    assert sum(calls.values()) >= sum(1 for answer in report.values() if answer["ok"])
    assert calls[(("action", "event_get"), ("outcome", "ok"))] == 1
    # and its publications went through the publication queue
    assert values[("langbot_stream_publish_lag_seconds_count", (("stream", "run"),))] >= 1
    # and the worker reports its runtime connection open
    pid = str(metrics_worker.process.pid)
    assert values[("langbot_runtime_connected", (("pid", pid),))] == 1
    # and the worker's log lines of the run carry its id and workspace
    tag = f"[run={run.run_id} workspace={binding.workspace.slug}]"
    deadline = time.monotonic() + 5
    while f"{tag}: run {run.run_id} completed" not in metrics_worker.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"{tag}: run {run.run_id} completed" in metrics_worker.log(), metrics_worker.log()[-3000:]
    assert f"{tag}: run={run.run_id} runner={QA_RUNNER_ID} action=" in metrics_worker.log()

    # when the worker stops, its counters stay counted but its runtime connection is no longer reported
    metrics_worker.stop()
    values = scrape()
    assert values[(f"{duration[0]}_count", duration[1])] == 1
    assert ("langbot_runtime_connected", (("pid", pid),)) not in values
