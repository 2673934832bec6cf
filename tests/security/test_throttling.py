"""REST throttling per API key: over `LANGBOT_API_THROTTLE_RATE` a key gets 429 `rate_limited` with
`Retry-After`; other keys keep going; a cache outage never turns into refused requests."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_key_over_its_rate_gets_429_with_retry_after_in_the_documented_shape(settings, api_client):
    settings.LANGBOT_API_THROTTLE_RATE = "3/minute"

    statuses = [api_client.get("/api/v1/runners").status_code for _ in range(3)]
    refused = api_client.get("/api/v1/runners")

    assert statuses == [200, 200, 200]
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60


def test_the_rate_is_counted_per_key(settings, workspace, api_client_for):
    settings.LANGBOT_API_THROTTLE_RATE = "2/minute"
    busy, other = api_client_for(workspace), api_client_for(workspace)
    for _ in range(3):
        busy.get("/api/v1/runners")

    assert busy.get("/api/v1/runners").status_code == 429
    assert other.get("/api/v1/runners").status_code == 200


def test_writes_are_counted_too(settings, api_client):
    settings.LANGBOT_API_THROTTLE_RATE = "1/minute"
    api_client.get("/api/v1/bindings")

    response = api_client.post("/api/v1/bindings", {}, format="json")

    assert response.status_code == 429


def test_off_turns_throttling_off(settings, api_client):
    settings.LANGBOT_API_THROTTLE_RATE = "off"

    statuses = {api_client.get("/api/v1/runners").status_code for _ in range(5)}

    assert statuses == {200}


def test_an_unreachable_cache_lets_requests_through(settings, api_client):
    settings.LANGBOT_API_THROTTLE_RATE = "1/minute"
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:9/0"}
    }

    statuses = [api_client.get("/api/v1/runners").status_code for _ in range(3)]

    assert statuses == [200, 200, 200]


def test_the_schema_documents_the_429_answer(api_client):
    schema = api_client.get("/api/schema/", {"format": "json"}).json()

    assert "429" in schema["paths"]["/api/v1/bots"]["post"]["responses"]
    assert "429" in schema["paths"]["/api/v1/runs/{run_id}"]["get"]["responses"]
