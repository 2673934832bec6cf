"""Fixtures of the alert tests: a local webhook receiver (the one the completion webhook tests use)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.platform_http import serving
from tests.platforms.webhooks.receiver import WebhookReceiver


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with serving(WebhookReceiver()) as fake:
        yield fake
