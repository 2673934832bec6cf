"""Fixtures shared by the whole suite: API clients, workspaces and the process-wide runtime link."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGINS_DIR = REPO_ROOT / "plugins"


@pytest.fixture
def workspace(db):
    from tests.factories import WorkspaceFactory

    return WorkspaceFactory.create()


@pytest.fixture
def api_client_for(db):
    """Build a DRF client authenticated with a fresh API key of the given workspace."""
    from rest_framework.test import APIClient

    from bindings.services import api_key_create

    def build(workspace):
        _, key = api_key_create(workspace=workspace)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client

    return build


@pytest.fixture
def api_client(workspace, api_client_for):
    return api_client_for(workspace)


@pytest.fixture
def runtime_plugins(settings) -> Iterator[Callable[..., None]]:
    """Point the host's runtime link at the given plugin directories (a fresh runtime child each time)."""
    from runners.runtime import runtime_link_reset

    def use(*dirs: Path) -> None:
        settings.LANGBOT_PLUGIN_DIRS = [str(d) for d in dirs]
        runtime_link_reset()

    yield use
    runtime_link_reset()


@pytest.fixture(scope="session", autouse=True)
def _close_runtime_link() -> Iterator[None]:
    yield
    from runners.runtime import runtime_link_reset

    runtime_link_reset()
