"""The operator-facing entry points: /healthz, the OpenAPI schema and docs, the admin login."""

from __future__ import annotations

import pytest
from django.test import Client

# `/healthz` reads through its own database alias (`health`, a mirror of `default` in tests).
pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", "health"]), pytest.mark.integration]


def test_healthz_reports_every_dependency_ok(runtime_plugins):
    from tests.conftest import PLUGINS_DIR

    runtime_plugins(PLUGINS_DIR)

    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "redis": "ok", "broker": "ok", "runtime": "ok"},
    }


def test_healthz_answers_503_and_names_the_failing_check(settings, runtime_plugins):
    from tests.conftest import PLUGINS_DIR

    runtime_plugins(PLUGINS_DIR)
    settings.REDIS_URL = "redis://127.0.0.1:9/0"

    response = Client().get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["redis"].startswith("error")
    assert body["checks"]["database"] == "ok"


def test_openapi_schema_and_docs_are_served():
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/json")
    docs = Client().get("/api/docs/")

    assert schema.status_code == 200
    assert "/api/v1/runners" in schema.json()["paths"]
    assert docs.status_code == 200


def test_the_schema_documents_the_sse_stream_beside_the_json_operations():
    paths = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]

    stream = paths["/api/v1/runs/{run_id}/stream"]["get"]
    assert stream["operationId"] == "runs_stream"
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert {p["name"] for p in stream["parameters"]} == {"run_id", "workspace", "after_seq", "Last-Event-ID"}
    assert stream["security"] == paths["/api/v1/runs/{run_id}"]["get"]["security"]


def test_admin_login_page_is_served():
    assert Client().get("/admin/login/").status_code == 200
