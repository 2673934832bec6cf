"""Fixtures shared by the whole suite: API clients, workspaces and the process-wide runtime link; the rule
that a run with `LANGBOT_FAIL_ON_SKIP` set (as `.ci/run` sets it) fails when any test was skipped; and, with
`LANGBOT_TEST_DATABASE_ONLY` set (CI's PostgreSQL pass, after which `make test` runs everything on SQLite), only
the tests that can reach a database."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# One set of real processes (worker, daphne) per session, shared by every directory that needs them.
pytest_plugins = ["tests.processes"]

REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGINS_DIR = REPO_ROOT / "plugins"
XDIST_ONE_WORKER_DIRS = ("tests/langbot_plugin/",)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    from django.db import connection

    from tests.processes import process_tests_gate  # registered (and assertion-rewritten) as a plugin above

    process_tests_gate(items)
    for item in items:
        # Under pytest-xdist (`make test`): a package whose fixtures start processes once per package (LangBot's
        # runtime and a worker of its own) runs in one worker, not once in each.
        if any(part in str(item.fspath) for part in XDIST_ONE_WORKER_DIRS):
            item.add_marker(pytest.mark.xdist_group(Path(str(item.fspath)).parent.name))
    if os.environ.get("LANGBOT_TEST_DATABASE_ONLY"):
        _deselect(config, items, lambda item: not _reaches_a_database(item))
    if connection.vendor != "postgresql":
        # On SQLite (`make test`'s embedded default) these are not missing a service, they test a PostgreSQL
        # feature.
        _deselect(config, items, lambda item: item.get_closest_marker("postgres") is not None)


# A test whose fixtures include none of these, and that is neither marked `django_db` nor `integration` (real
# processes, which read the configured database), cannot reach a database: pytest-django refuses it one.
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "live_server", "django_db_reset_sequences", "django_db_serialized_rollback"}
)


def _reaches_a_database(item: Any) -> bool:
    return bool(
        DATABASE_FIXTURES.intersection(item.fixturenames)
        or item.get_closest_marker("django_db")
        or item.get_closest_marker("integration")
    )


def _deselect(config: Any, items: list[Any], which: Callable[[Any], bool]) -> None:
    """Deselected, not skipped: a skip fails a run with LANGBOT_FAIL_ON_SKIP."""
    deselected = [item for item in items if which(item)]
    if deselected:
        items[:] = [item for item in items if not which(item)]
        config.hook.pytest_deselected(items=deselected)


@pytest.fixture(autouse=True)
def artifact_dir(request: Any, settings: Any, tmp_path: Path) -> Path | None:
    """A test's artifact blobs go to its own directory, except in tests with real processes: there the worker
    and daphne read the configured storage too."""
    if request.node.get_closest_marker("integration"):
        return None
    directory = tmp_path / "artifacts"
    settings.ARTIFACT_STORAGE_URL = f"file://{directory}"
    return directory


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
    from runtimes.link import runtime_link_reset

    def use(*dirs: Path) -> None:
        settings.LANGBOT_PLUGIN_DIRS = [str(d) for d in dirs]
        runtime_link_reset()

    yield use
    runtime_link_reset()


@pytest.fixture
def runtime_unreachable(settings) -> Iterator[None]:
    """The host's runtime link pointed where nothing listens, for a test that needs no runtime; the link is
    dropped afterwards so later tests do not keep dialling the dead address."""
    from runtimes.link import runtime_link_reset

    settings.LANGBOT_RUNTIME_URL = "ws://127.0.0.1:9"
    runtime_link_reset()
    yield
    runtime_link_reset()


@pytest.fixture(autouse=True)
def _forget_api_keys() -> Iterator[None]:
    """Each test's rows are rolled back after it, which never happens to a running host: a key kept by
    `bindings.authentication` must not outlive the test whose database had it."""
    yield
    from bindings.authentication import _cache

    _cache.clear()


@pytest.fixture(scope="session", autouse=True)
def _close_runtime_link() -> Iterator[None]:
    yield
    from runtimes.link import runtime_link_reset

    runtime_link_reset()


# --- a skipped test fails the run where nothing may be missing ------------------------------------------

FAIL_ON_SKIP_ENV = "LANGBOT_FAIL_ON_SKIP"
_skipped: list[str] = []


def pytest_runtest_logreport(report: Any) -> None:
    # An expected failure (xfail) is reported as skipped too; it is not a test that did not run.
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if os.environ.get(FAIL_ON_SKIP_ENV) and _skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if os.environ.get(FAIL_ON_SKIP_ENV) and _skipped:
        terminalreporter.write_sep("=", f"{len(_skipped)} skipped test(s) fail this run ({FAIL_ON_SKIP_ENV} is set)")
        for nodeid in _skipped[:50]:
            terminalreporter.write_line(f"skipped: {nodeid}")
