"""An API key's `last_used_at` is written at most once a minute, however busy the key: a hot integration must
not turn every request into a write. With the per-process key cache on or off."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from bindings.models import ApiKey
from bindings.services import api_key_create

pytestmark = pytest.mark.django_db


def _key_writes(queries: CaptureQueriesContext) -> int:
    table = connection.ops.quote_name(ApiKey._meta.db_table)
    return sum(1 for q in queries if q["sql"].startswith(f"UPDATE {table}"))


@pytest.mark.parametrize("cache_seconds", [2.0, 0.0])
def test_last_used_at_is_written_once_a_minute(workspace, settings, monkeypatch, cache_seconds):
    settings.LANGBOT_API_KEY_CACHE_SECONDS = cache_seconds
    api_key, key = api_key_create(workspace=workspace)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    start = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: start)

    with CaptureQueriesContext(connection) as first_minute:
        answers = [client.get("/api/v1/runs").status_code for _ in range(20)]
    api_key.refresh_from_db()

    assert answers == [200] * 20
    assert _key_writes(first_minute) == 1
    assert api_key.last_used_at == start

    # Past the minute (and past the key cache's seconds) the next request writes again, once.
    later = start + timedelta(seconds=61)
    monkeypatch.setattr(timezone, "now", lambda: later)
    if cache_seconds:
        settings.LANGBOT_API_KEY_CACHE_SECONDS = 0.0  # the kept instance would also have expired by then
    with CaptureQueriesContext(connection) as next_minute:
        answers = [client.get("/api/v1/runs").status_code for _ in range(5)]
    api_key.refresh_from_db()

    assert answers == [200] * 5
    assert _key_writes(next_minute) == 1
    assert api_key.last_used_at == later
