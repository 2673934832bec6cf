"""A key found once is kept per process for LANGBOT_API_KEY_CACHE_SECONDS: revocation reaches the process
within that time, a wrong secret is never let through by a kept key, and 0 means no cache."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from bindings import authentication
from bindings.models import ApiKey
from bindings.services import api_key_create

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(authentication.time, "monotonic", clock)
    return clock


def _client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_a_revoked_key_is_refused_once_the_cache_time_has_passed(workspace, settings, clock):
    settings.LANGBOT_API_KEY_CACHE_SECONDS = 2.0
    _, key = api_key_create(workspace=workspace)
    client = _client(key)
    assert client.get("/api/v1/runners").status_code == 200

    ApiKey.objects.filter(workspace=workspace).update(revoked_at=timezone.now())
    clock.now += 2.5

    assert client.get("/api/v1/runners").status_code == 401


def test_without_the_cache_a_revoked_key_is_refused_at_once(workspace, settings, clock):
    settings.LANGBOT_API_KEY_CACHE_SECONDS = 0
    _, key = api_key_create(workspace=workspace)
    client = _client(key)
    assert client.get("/api/v1/runners").status_code == 200

    ApiKey.objects.filter(workspace=workspace).update(revoked_at=timezone.now())

    assert client.get("/api/v1/runners").status_code == 401


def test_a_kept_key_does_not_let_a_wrong_secret_in(workspace, settings, clock):
    settings.LANGBOT_API_KEY_CACHE_SECONDS = 60.0
    _, key = api_key_create(workspace=workspace)
    assert _client(key).get("/api/v1/runners").status_code == 200

    lbk, prefix, _ = key.split("_", 2)
    response = _client(f"{lbk}_{prefix}_{'x' * 20}").get("/api/v1/runners")

    assert response.status_code == 401
