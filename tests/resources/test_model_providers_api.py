"""REST CRUD of model providers: the API key and header values are write-only, encrypted at rest and
never echoed; everything is scoped to the caller's workspace."""

from __future__ import annotations

import pytest
from django.db import connection

from foundation.crypto import SECRET_MASK
from resources.models import ModelProvider
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

SECRET = "sk-live-0123456789abcdef"
BODY = {
    "name": "OpenAI",
    "base_url": "https://api.openai.com/v1/",
    "api_key": SECRET,
    "headers": {"OpenAI-Organization": "org-secret-42"},
    "timeout_seconds": 30,
}


def raw_row(provider: ModelProvider) -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key, headers FROM resources_modelprovider WHERE id = %s", [provider.pk])
        return cursor.fetchone()


def test_create_a_provider_and_see_its_key_never_echoed(api_client):
    response = api_client.post("/api/v1/model-providers", BODY, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["provider_id"] == "openai"
    assert body["base_url"] == "https://api.openai.com/v1"
    assert body["headers"] == {"OpenAI-Organization": SECRET_MASK}
    assert body["has_api_key"] is True
    assert (body["timeout_seconds"], body["max_retries"]) == (30, 2)
    assert "api_key" not in body
    for answer in (
        response,
        api_client.get("/api/v1/model-providers"),
        api_client.get("/api/v1/model-providers/openai"),
    ):
        text = answer.content.decode()
        assert SECRET not in text
        assert "org-secret-42" not in text


def test_the_key_and_headers_are_encrypted_at_rest(api_client):
    api_client.post("/api/v1/model-providers", BODY, format="json")
    provider = ModelProvider.objects.get()

    raw_key, raw_headers = raw_row(provider)

    assert SECRET not in raw_key
    assert "org-secret-42" not in raw_headers
    assert provider.api_key == SECRET
    assert provider.headers == {"OpenAI-Organization": "org-secret-42"}


def test_patch_with_the_mask_keeps_the_secrets_and_new_values_replace_them(api_client):
    api_client.post("/api/v1/model-providers", {**BODY, "provider_id": "oa"}, format="json")

    response = api_client.patch(
        "/api/v1/model-providers/oa",
        {"api_key": SECRET_MASK, "headers": {"OpenAI-Organization": SECRET_MASK, "X-Team": "blue"}, "max_retries": 0},
        format="json",
    )

    assert response.status_code == 200, response.content
    provider = ModelProvider.objects.get()
    assert provider.api_key == SECRET
    assert provider.headers == {"OpenAI-Organization": "org-secret-42", "X-Team": "blue"}
    assert provider.max_retries == 0
    api_client.patch("/api/v1/model-providers/oa", {"api_key": "sk-rotated"}, format="json")
    assert ModelProvider.objects.get().api_key == "sk-rotated"


def test_a_provider_without_a_key_says_so(api_client):
    body = {"name": "Local", "base_url": "http://127.0.0.1:11434/v1"}

    response = api_client.post("/api/v1/model-providers", body, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["has_api_key"] is False
    assert response.json()["timeout_seconds"] == 60


def test_a_mask_for_a_key_never_stored_is_refused(api_client):
    body = {"name": "Local", "base_url": "http://127.0.0.1:11434/v1", "api_key": SECRET_MASK}

    response = api_client.post("/api/v1/model-providers", body, format="json")

    assert response.status_code == 400
    assert "api_key" in response.json()["error"]["details"]["fields"]


@pytest.mark.parametrize("base_url", ["ftp://example.com/v1", "api.openai.com/v1", "http://", "https://x.io/v1?a=1"])
def test_a_base_url_that_is_not_http_is_a_field_error(api_client, base_url):
    response = api_client.post("/api/v1/model-providers", {**BODY, "base_url": base_url}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_argument"
    assert "base_url" in response.json()["error"]["details"]["fields"]


def test_invalid_fields_are_named(api_client):
    body = {**BODY, "timeout_seconds": 0, "headers": {"bad header": "x"}, "colour": "red"}

    fields = api_client.post("/api/v1/model-providers", body, format="json").json()["error"]["details"]["fields"]

    assert "timeout_seconds" in fields
    assert any(key.startswith("headers") for key in fields)
    assert fields["colour"] == "Unknown field."


def test_a_taken_provider_id_is_a_field_error(api_client, workspace):
    ModelProviderFactory.create(workspace=workspace, provider_id="openai")

    response = api_client.post("/api/v1/model-providers", {**BODY, "provider_id": "openai"}, format="json")

    assert response.status_code == 400
    assert "already exists" in response.json()["error"]["details"]["fields"]["provider_id"]


def test_a_generated_id_avoids_a_taken_one(api_client, workspace):
    ModelProviderFactory.create(workspace=workspace, provider_id="openai")

    response = api_client.post("/api/v1/model-providers", BODY, format="json")

    assert response.json()["provider_id"].startswith("openai-")


def test_the_same_provider_id_in_another_workspace_is_fine(api_client):
    ModelProviderFactory.create(workspace=WorkspaceFactory.create(), provider_id="openai")

    assert (
        api_client.post("/api/v1/model-providers", {**BODY, "provider_id": "openai"}, format="json").status_code == 201
    )


def test_a_provider_id_cannot_be_changed(api_client, workspace):
    ModelProviderFactory.create(workspace=workspace, provider_id="openai")

    response = api_client.patch("/api/v1/model-providers/openai", {"provider_id": "other"}, format="json")

    assert response.status_code == 400
    assert "provider_id" in response.json()["error"]["details"]["fields"]


def test_another_workspaces_provider_answers_404(api_client):
    ModelProviderFactory.create(workspace=WorkspaceFactory.create(), provider_id="theirs")

    assert api_client.get("/api/v1/model-providers/theirs").status_code == 404
    assert api_client.patch("/api/v1/model-providers/theirs", {"name": "x"}, format="json").status_code == 404
    assert api_client.delete("/api/v1/model-providers/theirs").status_code == 404
    assert api_client.get("/api/v1/model-providers").json() == {"items": []}
    assert ModelProvider.objects.filter(provider_id="theirs").exists()


def test_a_provider_that_models_use_cannot_be_deleted(api_client, workspace):
    provider = ModelProviderFactory.create(workspace=workspace, provider_id="openai")
    ModelFactory.create(provider=provider, model_id="gpt-4o")

    response = api_client.delete("/api/v1/model-providers/openai")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "failed_precondition"
    assert "gpt-4o" in response.json()["error"]["details"]["fields"]["provider_id"]
    assert ModelProvider.objects.filter(provider_id="openai").exists()


def test_an_unused_provider_is_deleted(api_client, workspace):
    ModelProviderFactory.create(workspace=workspace, provider_id="spare")

    assert api_client.delete("/api/v1/model-providers/spare").status_code == 204
    assert not ModelProvider.objects.exists()
