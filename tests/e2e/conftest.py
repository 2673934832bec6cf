"""The browser tests' daphne (the session's `start_web` of `tests/processes.py`, with a small upload cap) and
browser: Debian's `/usr/bin/chromium`, driven by Playwright; Playwright's own browser downloads are never used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.processes import CHROMIUM

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
SCREENSHOTS = REPO_ROOT / "var" / "e2e"
UPLOAD_MAX_BYTES = 256 * 1024


@pytest.fixture(scope="session")
def web_server(start_web) -> str:
    """daphne on a free port; yields its base URL and stops it at the end of the session."""
    return str(
        start_web(
            LANGBOT_DB_POOL_MAX="8",
            # Small enough that the chat test can show the server's 413 without sending much.
            LANGBOT_ARTIFACT_UPLOAD_MAX_BYTES=str(UPLOAD_MAX_BYTES),
        ).url
    )


@pytest.fixture
def browser(monkeypatch) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls (and the
    # database flush after it) are still plain synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield instance
        finally:
            instance.close()
            # While Playwright's loop runs in this thread, Django keeps the test's database connections per
            # context, not per thread: only here can they be closed (returned to the pool). Left open, they
            # kept the test database from being dropped at the end of the run.
            connections.close_all()


@pytest.fixture
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
