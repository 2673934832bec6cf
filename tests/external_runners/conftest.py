"""Fixtures of the external runners' tests: the scripted in-process host, the fake platforms, and the
official runners installed in the host's catalog."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from langbot_sdk.protocol import ListAgentRunnersResponse
from langbot_sdk.runtime.loader import load_plugins
from runtimes.descriptors import runner_descriptors_sync
from tests.external_runners.host import PLUGINS_DIR, ScriptedHost, start_host
from tests.fakes.coze_server import FakeCoze, fake_coze
from tests.fakes.dashscope_server import FakeDashScope, fake_dashscope
from tests.fakes.dify_server import FakeDify, fake_dify
from tests.fakes.langflow_server import FakeLangflow, fake_langflow
from tests.fakes.n8n_server import FakeN8n, fake_n8n
from tests.fakes.tbox_server import FakeTbox, fake_tbox


@pytest.fixture
async def host() -> AsyncIterator[ScriptedHost]:
    scripted, served = await start_host()
    yield scripted
    await scripted.connection.close()
    served.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await served


@pytest.fixture
def installed_runners() -> None:
    """The repository's plugins' runners in the host's catalog, as the runtime reports them."""
    plugins = load_plugins([PLUGINS_DIR])
    runner_descriptors_sync(report=ListAgentRunnersResponse(runners=plugins.manifests, plugins=plugins.reports))


@pytest.fixture
def dify() -> Iterator[FakeDify]:
    with fake_dify() as server:
        yield server


@pytest.fixture
def n8n() -> Iterator[FakeN8n]:
    with fake_n8n() as server:
        yield server


@pytest.fixture
def coze() -> Iterator[FakeCoze]:
    with fake_coze() as server:
        yield server


@pytest.fixture
def dashscope() -> Iterator[FakeDashScope]:
    with fake_dashscope() as server:
        yield server


@pytest.fixture
def langflow() -> Iterator[FakeLangflow]:
    with fake_langflow() as server:
        yield server


@pytest.fixture
def tbox() -> Iterator[FakeTbox]:
    with fake_tbox() as server:
        yield server
