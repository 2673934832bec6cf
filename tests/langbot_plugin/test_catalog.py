"""What a refresh of LangBot's runners tells the operator, without processes: the runners the mapping changed
and the plugins that did not load are named (REST `plugin_warnings`/`plugin_errors`), and a listing taken
while the runtime is still starting its plugins marks nothing missing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bindings.models import RunnerDescriptor
from runtimes.langbot import LangBotRuntime
from runtimes.langbot.bridge import PLUGIN_LOAD_GRACE, LangBotCatalog
from runtimes.langbot.catalog import (
    CATALOG_CACHE_KEY,
    HOLDER_CACHE_KEY,
    langbot_catalog_publish,
    langbot_runners_refresh,
)
from tests.factories import RunnerDescriptorFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_published_catalog(cache_of_its_own):
    """The catalog a test publishes must not outlive it: another test's refresh would read it."""
    from django.core.cache import cache

    yield
    cache.delete_many([CATALOG_CACHE_KEY, HOLDER_CACHE_KEY])


def _runner(plugin: str, **manifest: Any) -> dict[str, Any]:
    return {
        "plugin_author": "lbp",
        "plugin_name": plugin,
        "plugin_version": "1.0.0",
        "manifest": {"id": f"plugin:lbp/{plugin}/main", "name": "main", "usages": ["agent"], **manifest},
    }


def _plugin(name: str, declared: list[str], mounted: list[str]) -> dict[str, Any]:
    raw = {
        "metadata": {"author": "lbp", "name": name, "version": "2.0.0"},
        "spec": {"components": {kind: {} for kind in declared}},
    }
    components = [{"manifest": {"manifest": {"kind": kind, "metadata": {"name": "c"}}}} for kind in mounted]
    return {"manifest": {"owner": "lbp", "manifest": raw}, "status": "initialized", "components": components}


def _publish(
    runtime: LangBotRuntime, runners: list[dict[str, Any]], plugins: list[dict[str, Any]], *, settled: bool
) -> None:
    asyncio.run(langbot_catalog_publish(LangBotCatalog(report=runtime._report(runners, plugins), settled=settled)))


def test_a_refresh_names_what_the_mapping_dropped_and_the_plugins_that_did_not_load(settings) -> None:
    settings.LANGBOT_LANGBOT_RUNTIME_URL = "ws://127.0.0.1:9/control/ws"
    runtime = LangBotRuntime(settings.LANGBOT_LANGBOT_RUNTIME_URL)
    runtime.started["lbp/broken"] = time.monotonic() - PLUGIN_LOAD_GRACE - 1  # started, never registered
    runners = [_runner("good", capabilities={"streaming": True, "steering": True})]
    plugins = [
        _plugin("good", ["Runner"], ["Runner"]),
        _plugin("odd", ["AgentRunner"], []),  # a component kind this SDK release does not know
        _plugin("tools-only", ["Tool"], ["Tool"]),  # not a runner plugin: nothing to say
    ]
    _publish(runtime, runners, plugins, settled=True)

    result = langbot_runners_refresh(settle=0)

    assert result.available == ["plugin:lbp/good/main"]
    assert [warning["warning"] for warning in result.plugin_warnings] == [
        "plugin:lbp/good/main: capability ['steering'] has no equivalent on this host"
    ]
    errors = {error["path"]: error["error"] for error in result.plugin_errors}
    assert set(errors) == {"langbot:lbp/odd", "langbot:lbp/broken"}
    assert "mounted without its ['AgentRunner'] components" in errors["langbot:lbp/odd"]
    assert "started but did not load" in errors["langbot:lbp/broken"]
    # The admin's runner list reads the warnings off the descriptor.
    descriptor = RunnerDescriptor.objects.get(runner_id="plugin:lbp/good/main")
    assert descriptor.manifest["metadata"]["langbot"]["warnings"] == [result.plugin_warnings[0]["warning"]]


def test_a_listing_taken_while_plugins_start_marks_no_runner_missing(settings) -> None:
    settings.LANGBOT_LANGBOT_RUNTIME_URL = "ws://127.0.0.1:9/control/ws"
    kept = RunnerDescriptorFactory.create(source=RunnerDescriptor.Source.LANGBOT, plugin_author="lbp")
    runtime = LangBotRuntime(settings.LANGBOT_LANGBOT_RUNTIME_URL)

    _publish(runtime, [], [], settled=False)
    assert langbot_runners_refresh(settle=0).missing == []
    kept.refresh_from_db()
    assert kept.status == RunnerDescriptor.Status.AVAILABLE

    _publish(runtime, [], [], settled=True)
    assert langbot_runners_refresh(settle=0).missing == [kept.runner_id]
