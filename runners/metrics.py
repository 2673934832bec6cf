"""The host's Prometheus metrics of runs and the run-scoped API (the runtime link's are in
`runtimes.metrics`): each observed where it happens, all served at `/metrics` (`langbot_host/metrics_view.py`).

Counters and histograms are observed in the process where the thing happens (a worker ends a run, a
link loses the runtime) and written to the shared `PROMETHEUS_MULTIPROC_DIR` (settings), so one scrape of
the web process sees every process of the host. How many runs are in each status is not counted by any
process: `RunsCollector` reads it from the database at scrape time, the source of truth (docs/architecture.md, "Runs"),
so it is right whichever process — or sweeper — moved a run, and after any restart.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from runners.models import Run

# Runs last from a second to the 300 s default deadline and beyond; queue waits from milliseconds (an idle
# worker) to minutes (a `queue` conversation or a saturated host).
_RUN_SECONDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_WAIT_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# The publication queue normally empties within a Redis round trip; a backlog shows as tens of ms and more.
_LAG_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

RUN_DURATION = Histogram(
    "langbot_run_duration_seconds",
    "Time from a run's claim to its end, by runner and final status (observed by the worker that ended it).",
    ["runner", "status"],
    buckets=_RUN_SECONDS,
)
RUN_QUEUE_WAIT = Histogram(
    "langbot_run_queue_wait_seconds",
    "Time a run waited queued, from its creation to its claim by a worker, by runner.",
    ["runner"],
    buckets=_WAIT_SECONDS,
)
PROXY_CALLS = Counter(
    "langbot_proxy_calls",
    "Proxy calls of runners to the host, by action and outcome (`ok` or the error code), as audited.",
    ["action", "outcome"],
)
# Labelled so that a process that never publishes (a management command, the beat) writes no file for it.
PUBLISH_LAG = Histogram(
    "langbot_stream_publish_lag_seconds",
    "Time a committed publication waited in its process's publication queue before it left for the channel layer, "
    "by stream (`run`: a run's events and status; `conv`: a conversation's transcript changes).",
    ["stream"],
    buckets=_LAG_SECONDS,
)


def runs_by_status_and_runner() -> list[tuple[str, str, int]]:
    """How many runs are in each status, per runner: one grouped count over the run table."""
    rows = Run.objects.order_by().values_list("status", "runner_id").annotate(count=Count("id"))
    return [(status, runner, count) for status, runner, count in rows]


class RunsCollector(Collector):
    """`langbot_runs{status, runner}`, read from the database at each scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "langbot_runs", "Runs in each status, by runner (from the database).", labels=["status", "runner"]
        )
        seen: set[tuple[str, str]] = set()
        runners: set[str] = set()
        for status, runner, count in runs_by_status_and_runner():
            family.add_metric([status, runner], count)
            seen.add((status, runner))
            runners.add(runner)
        # Every status of a known runner is reported, zeros included, so a rate or an alert on `queued`
        # does not see its series vanish when the last such run moves on.
        for runner in runners:
            for status in Run.Status.values:
                if (status, runner) not in seen:
                    family.add_metric([status, runner], 0)
        yield family
