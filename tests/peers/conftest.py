"""Real n8n and Langflow for the runners' tests (`make peers`, never CI): each is started from what `make
peers` installed under var/peers, on a loopback port the kernel picks, with its data in a temporary
directory, set up through its own API (an owner or superuser, a credential or API key, a workflow or flow
written in tests/peers), and stopped at the end of the session.

The tests here are collected only when `LANGBOT_PEERS` is set: CI's collection never sees them, so nothing
is skipped there. With it set, a peer that is not installed fails its tests naming `make peers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.external_runners.host import ScriptedHost, start_host
from tests.peers.processes import LangflowPeer, N8nPeer, langflow_start, n8n_start

PEERS_ENV = "LANGBOT_PEERS"
collect_ignore_glob = [] if os.environ.get(PEERS_ENV) else ["test_*.py"]


@pytest.fixture
async def host() -> AsyncIterator[ScriptedHost]:
    """The real plugin runtime in this process, driven by the scripted host of tests/external_runners."""
    scripted, served = await start_host()
    yield scripted
    await scripted.connection.close()
    served.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await served


@pytest.fixture(scope="session")
def langflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LangflowPeer]:
    with langflow_start(tmp_path_factory.mktemp("langflow")) as peer:
        yield peer


@pytest.fixture(scope="session")
def n8n(tmp_path_factory: pytest.TempPathFactory) -> Iterator[N8nPeer]:
    with n8n_start(tmp_path_factory.mktemp("n8n")) as peer:
        yield peer
