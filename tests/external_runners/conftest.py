"""Fixtures of the external runners' tests: the scripted in-process host and the fake platforms."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.external_runners.host import ScriptedHost, start_host
from tests.fakes.dify_server import FakeDify, fake_dify
from tests.fakes.n8n_server import FakeN8n, fake_n8n


@pytest.fixture
async def host() -> AsyncIterator[ScriptedHost]:
    scripted, served = await start_host()
    yield scripted
    await scripted.connection.close()
    served.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await served


@pytest.fixture
def dify() -> Iterator[FakeDify]:
    with fake_dify() as server:
        yield server


@pytest.fixture
def n8n() -> Iterator[FakeN8n]:
    with fake_n8n() as server:
        yield server
