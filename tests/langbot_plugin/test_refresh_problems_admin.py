"""A LangBot plugin that fails under `lbp rt` before naming a runner has no row in the admin's runner list: the
last refresh's plugin errors and warnings are shown above the list, on every visit, until a refresh without
them. The host's own plugin runtime is a real child here; LangBot's listing is the catalog a worker publishes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from runtimes.langbot import LangBotRuntime
from runtimes.langbot.bridge import LangBotCatalog
from runtimes.langbot.catalog import CATALOG_CACHE_KEY, HOLDER_CACHE_KEY, langbot_catalog_publish
from tests.conftest import PLUGINS_DIR

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CHANGELIST = "/admin/bindings/runnerdescriptor/"
REFRESH = "/admin/bindings/runnerdescriptor/refresh/"


@pytest.fixture(autouse=True)
def _forget_refreshes(cache_of_its_own) -> Iterator[None]:
    """The published catalog and the kept problems must not outlive the test: later refreshes would read them."""
    from django.core.cache import cache

    from runtimes.catalog import REFRESH_PROBLEMS_CACHE_KEY

    yield
    cache.delete_many([CATALOG_CACHE_KEY, HOLDER_CACHE_KEY, REFRESH_PROBLEMS_CACHE_KEY])


def _publish_listing(runtime: LangBotRuntime, *, broken: bool) -> None:
    """LangBot's runtime listing as the worker publishes it; `broken`: with a plugin that declares a runner
    component kind this SDK release does not know, so it mounts with no components."""
    plugins = []
    if broken:
        raw = {
            "metadata": {"author": "lbp", "name": "odd", "version": "1.0.0"},
            "spec": {"components": {"AgentRunner": {}}},
        }
        plugins.append({"manifest": {"owner": "lbp", "manifest": raw}, "status": "initialized", "components": []})
    catalog = LangBotCatalog(report=runtime._report([], plugins), settled=True)
    asyncio.run(langbot_catalog_publish(catalog))


def test_a_langbot_plugin_that_failed_to_load_stays_named_on_the_admin_runner_list(
    settings, runtime_plugins, admin_client
) -> None:
    runtime_plugins(PLUGINS_DIR)
    settings.LANGBOT_LANGBOT_RUNTIME_URL = "ws://127.0.0.1:9/control/ws"  # the published catalog is read
    runtime = LangBotRuntime(settings.LANGBOT_LANGBOT_RUNTIME_URL)
    assert 'id="refresh-problems"' not in admin_client.get(CHANGELIST).content.decode()

    _publish_listing(runtime, broken=True)
    refreshed = admin_client.post(REFRESH, follow=True).content.decode()
    assert "1 plugin error(s), 0 warning(s): listed above the runners." in refreshed

    # Another visit later, with no refresh in between: still named, with the runtime's reason.
    page = admin_client.get(CHANGELIST).content.decode()
    assert 'id="refresh-problems"' in page
    assert "langbot:lbp/odd" in page
    assert "mounted without its [&#x27;AgentRunner&#x27;] components" in page

    _publish_listing(runtime, broken=False)
    admin_client.post(REFRESH)
    page = admin_client.get(CHANGELIST).content.decode()
    assert "langbot:lbp/odd" not in page
    assert 'id="refresh-problems"' not in page
