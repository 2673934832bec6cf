"""LangBot's agent runners in the runner catalog: descriptors of source `langbot`, synced from its runtime's
listing when the runner list is refreshed (`runtimes.catalog.runner_descriptors_refresh`).

Which process holds LangBot's control connection: the worker (`langbot_connection_hold`, started with its run
loop when `LANGBOT_LANGBOT_RUNTIME_URL` is set). LangBot's runtime serves one host connection at a time and
starts its plugins only while one is open, so the worker keeps it for as long as it runs (its runs use the
same connection) and puts the catalog it lists into the cache every few seconds. A refresh anywhere (REST,
admin, `sync_runners`) reads that catalog and so never takes the connection from the worker's runs; only
when no worker has published one lately does it connect itself, as before.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from bindings.models import RunnerDescriptor
from langbot_sdk.protocol import AgentAPIException, ListAgentRunnersResponse
from runtimes.descriptors import RunnerSyncResult, runner_descriptors_sync
from runtimes.hosts import RunnerHosts
from runtimes.langbot.bridge import HOLD_LIST_EVERY, LangBotCatalog, LangBotRunnerHost, langbot_catalog

logger = logging.getLogger(__name__)

CATALOG_CACHE_KEY = "langbot:runtime-catalog"
# Three missed listings and the holder counts as gone: a refresh connects itself.
CATALOG_CACHE_SECONDS = 3 * HOLD_LIST_EVERY


HOLDER_CACHE_KEY = "langbot:runtime-holder"


async def langbot_catalog_publish(catalog: LangBotCatalog) -> None:
    snapshot = {"report": catalog.report.model_dump(mode="json"), "settled": catalog.settled}
    try:
        await cache.aset(CATALOG_CACHE_KEY, snapshot, CATALOG_CACHE_SECONDS)
        await cache.aset(HOLDER_CACHE_KEY, True, CATALOG_CACHE_SECONDS)
    except Exception:  # the cache down costs refreshes their shortcut, not the connection
        logger.warning("could not publish the LangBot runtime's catalog", exc_info=True)


async def langbot_connection_hold(hosts: RunnerHosts) -> None:
    """Hold LangBot's control connection for this worker (see the module docstring)."""
    host = hosts.get(RunnerDescriptor.Source.LANGBOT)
    assert isinstance(host, LangBotRunnerHost)
    # Said before connecting: a refresh meanwhile waits for this worker's catalog instead of connecting
    # itself, which would take the connection from it (and the worker would take it back mid-listing).
    with contextlib.suppress(Exception):
        await cache.aset(HOLDER_CACHE_KEY, True, CATALOG_CACHE_SECONDS)
    await host.runtime.hold(langbot_catalog_publish)


def _holder_alive() -> bool:
    try:
        return bool(cache.get(HOLDER_CACHE_KEY))
    except Exception:
        return False


def _published() -> LangBotCatalog | None:
    try:
        snapshot: dict[str, Any] | None = cache.get(CATALOG_CACHE_KEY)
    except Exception:
        return None
    if not snapshot:
        return None
    report = ListAgentRunnersResponse.model_validate(snapshot["report"])
    return LangBotCatalog(report=report, settled=bool(snapshot.get("settled")))


def langbot_runners_refresh(*, settle: float | None = None) -> RunnerSyncResult:
    """Sync the `langbot` descriptors from LangBot's runtime. When it cannot be reached its runners are left
    as they are (a run of one fails until it is back) and the failure is one `plugin_errors` entry. While
    its plugins are still starting, runners it does not list yet are left as they are too."""
    catalog = _published()
    if catalog is None and _holder_alive():
        wait = settings.LANGBOT_LANGBOT_RUNTIME_SETTLE if settle is None else settle
        deadline = time.monotonic() + max(wait, CATALOG_CACHE_SECONDS)
        while catalog is None and time.monotonic() < deadline:
            time.sleep(0.5)
            catalog = _published()
    if catalog is None:
        try:
            catalog = langbot_catalog(settle=settle)
        except AgentAPIException as exc:
            logger.warning("LangBot plugin runtime: %s", exc.error.message)
            return RunnerSyncResult(plugin_errors=[{"path": "langbot", "error": exc.error.message}])
    return runner_descriptors_sync(
        report=catalog.report, source=RunnerDescriptor.Source.LANGBOT, keep_unreported=not catalog.settled
    )


def merge(into: RunnerSyncResult, other: RunnerSyncResult) -> RunnerSyncResult:
    into.available.extend(other.available)
    into.errored.extend(other.errored)
    into.missing.extend(other.missing)
    into.plugin_errors.extend(other.plugin_errors)
    into.plugin_warnings.extend(other.plugin_warnings)
    return into
