"""Refreshing the runner catalog from the plugin runtime (and, when configured, LangBot's): ask for its
runners, sync them (`descriptors`), and keep the refresh's problems for the admin.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from langbot_sdk.protocol import Action, ListAgentRunnersResponse
from runtimes.descriptors import RunnerSyncResult, runner_descriptors_sync
from runtimes.link import runtime_link

logger = logging.getLogger(__name__)


REFRESH_PROBLEMS_CACHE_KEY = "runners:last-refresh-problems"
# Enough to name every broken plugin of a real host; the refresh's own answer still carries them all.
REFRESH_PROBLEMS_KEPT = 100


def runner_refresh_problems_record(*, result: RunnerSyncResult) -> None:
    """Keep the last refresh's plugin errors and warnings for the admin's runner list: a plugin that failed
    before naming a runner (a broken manifest, an import error under LangBot's runtime) has no row to show
    its error on, and the refresh's answer is gone once read. Kept until the next refresh replaces it."""
    problems = {
        "at": timezone.now(),
        "plugin_errors": result.plugin_errors[:REFRESH_PROBLEMS_KEPT],
        "plugin_warnings": result.plugin_warnings[:REFRESH_PROBLEMS_KEPT],
    }
    try:
        cache.set(REFRESH_PROBLEMS_CACHE_KEY, problems, timeout=None)
    except Exception:  # the cache down costs the admin its summary, not the refresh
        logger.warning("could not keep the refresh's plugin errors for the admin", exc_info=True)


def runner_refresh_problems() -> dict[str, Any] | None:
    """What `runner_refresh_problems_record` kept: `at`, `plugin_errors`, `plugin_warnings`; None before any."""
    try:
        problems: dict[str, Any] | None = cache.get(REFRESH_PROBLEMS_CACHE_KEY)
    except Exception:
        return None
    return problems


def runner_descriptors_refresh(*, connect_wait: float | None = None) -> RunnerSyncResult:
    """Ask the plugin runtime for its runners and sync the descriptors. Raises `RuntimeUnavailable`.
    `connect_wait`: how long to wait for a runtime that is away (default: the link's reconnect wait; 0 for a
    person waiting on the answer, who should hear at once that the runtime is down)."""
    data = runtime_link().call_sync(Action.LIST_AGENT_RUNNERS, {}, connect_wait=connect_wait)
    result = runner_descriptors_sync(report=ListAgentRunnersResponse.model_validate(data))
    if settings.LANGBOT_LANGBOT_RUNTIME_URL:
        # LangBot's own plugin runtime, opt-in (runtimes.langbot); imported only when configured.
        from runtimes.langbot.catalog import langbot_runners_refresh, merge

        merge(result, langbot_runners_refresh(settle=None if connect_wait is None else 0.0))
    runner_refresh_problems_record(result=result)
    return result
