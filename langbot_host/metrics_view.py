"""`GET /metrics`: the host's Prometheus metrics (`runners/metrics.py`) in the text exposition format.

Protected (docs/operations.md, "Health and metrics"): it names runners and reveals load. A request is answered when it
carries `Authorization: Bearer <LANGBOT_METRICS_TOKEN>` (what a Prometheus scrape job sends) or comes from a
superuser's session (an operator looking from the admin). Without a configured token only superusers
get it and everyone else a 404, as if the endpoint did not exist; with a token, a wrong or missing one
gets a 401 naming the Bearer scheme, so a misconfigured scrape job says why it fails.
"""

from __future__ import annotations

import glob
import hmac
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from runners.metrics import RunsCollector


def _bearer_token(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _forget_dead_processes(directory: str) -> None:
    """Drop the live-gauge files of processes that are gone (killed without a clean exit), so the runtime
    connection of a dead worker is not reported forever. All processes share this host (the directory is
    local), so a pid that does not answer signal 0 has ended."""
    pids = {
        os.path.basename(path).rsplit("_", 1)[-1].removesuffix(".db")
        for path in glob.glob(f"{directory}/gauge_live*_*.db")
    }
    for pid in pids:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(int(pid), directory)
        except (ValueError, PermissionError):
            continue


def metrics_registry() -> CollectorRegistry:
    """A registry for one scrape: every process's counters and histograms, and the run counts of now."""
    registry = CollectorRegistry()
    directory = settings.PROMETHEUS_MULTIPROC_DIR
    _forget_dead_processes(directory)
    multiprocess.MultiProcessCollector(registry, path=directory)
    registry.register(RunsCollector())
    return registry


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.LANGBOT_METRICS_TOKEN
    superuser = request.user.is_authenticated and request.user.is_superuser
    if not superuser:
        if not token:
            return HttpResponse(status=404)
        if not hmac.compare_digest(_bearer_token(request).encode(), token.encode()):
            response = HttpResponse("a valid bearer token is required\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    # The classic text format (0.0.4): every Prometheus version reads it, and the host's names are ASCII.
    return HttpResponse(generate_latest(metrics_registry()), content_type=CONTENT_TYPE_PLAIN_0_0_4)
