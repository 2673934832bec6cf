"""LangBot's agent runners in the runner catalog: descriptors of source `langbot`, synced from its runtime's
listing when the runner list is refreshed (`runners.runtime.catalog.runner_descriptors_refresh`)."""

from __future__ import annotations

import logging

from bindings.models import RunnerDescriptor
from langbot_sdk.protocol import AgentAPIException
from runners.runtime.catalog import RunnerSyncResult, runner_descriptors_sync
from runners.runtime.langbot.bridge import langbot_report

logger = logging.getLogger(__name__)


def langbot_runners_refresh(*, settle: float | None = None) -> RunnerSyncResult:
    """Sync the `langbot` descriptors from LangBot's runtime. When it cannot be reached its runners are left
    as they are (a run of one fails until it is back) and the failure is one `plugin_errors` entry."""
    try:
        report = langbot_report(settle=settle)
    except AgentAPIException as exc:
        logger.warning("LangBot plugin runtime: %s", exc.error.message)
        return RunnerSyncResult(plugin_errors=[{"path": "langbot", "error": exc.error.message}])
    return runner_descriptors_sync(report=report, source=RunnerDescriptor.Source.LANGBOT)


def merge(into: RunnerSyncResult, other: RunnerSyncResult) -> RunnerSyncResult:
    into.available.extend(other.available)
    into.errored.extend(other.errored)
    into.missing.extend(other.missing)
    into.plugin_errors.extend(other.plugin_errors)
    return into
