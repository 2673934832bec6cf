"""REST CRUD of models: each names a provider of the same workspace."""

from __future__ import annotations

import pytest

from resources.models import KnowledgeBase, Model
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider(workspace):
    return ModelProviderFactory.create(workspace=workspace, provider_id="openai")


def test_create_a_model_and_read_it_back(api_client, provider):
    body = {
        "provider_id": "openai",
        "name": "gpt-4o-mini",
        "kind": "llm",
        "supports_tools": True,
        "context_window": 128000,
    }

    response = api_client.post("/api/v1/models", body, format="json")

    assert response.status_code == 201, response.content
    created = response.json()
    assert created["model_id"] == "gpt-4o-mini"
    assert created["provider_id"] == "openai"
    assert (created["supports_tools"], created["supports_vision"]) == (True, False)
    assert (created["context_window"], created["max_output_tokens"]) == (128000, None)
    assert api_client.get("/api/v1/models/gpt-4o-mini").json() == created
    assert api_client.get("/api/v1/models").json() == {"items": [created]}


def test_models_are_listed_by_kind(api_client, provider):
    ModelFactory.create(provider=provider, model_id="chat", kind="llm")
    ModelFactory.create(provider=provider, model_id="embed", kind="embedding")

    items = api_client.get("/api/v1/models?kind=embedding").json()["items"]

    assert [item["model_id"] for item in items] == ["embed"]
    assert api_client.get("/api/v1/models?kind=vision").status_code == 400


def test_an_unknown_provider_is_a_field_error(api_client, provider):
    response = api_client.post("/api/v1/models", {"provider_id": "nope", "name": "m", "kind": "llm"}, format="json")

    assert response.status_code == 400
    assert "nope" in response.json()["error"]["details"]["fields"]["provider_id"]


def test_another_workspaces_provider_is_unknown_here(api_client, provider):
    ModelProviderFactory.create(workspace=WorkspaceFactory.create(), provider_id="theirs")

    response = api_client.post("/api/v1/models", {"provider_id": "theirs", "name": "m", "kind": "llm"}, format="json")

    assert response.status_code == 400
    assert "provider_id" in response.json()["error"]["details"]["fields"]


def test_a_wrong_kind_and_bad_numbers_are_named(api_client, provider):
    body = {"provider_id": "openai", "name": "m", "kind": "chat", "context_window": 0, "supports_tools": "yes"}

    fields = api_client.post("/api/v1/models", body, format="json").json()["error"]["details"]["fields"]

    assert {"kind", "context_window", "supports_tools"} <= set(fields)


def test_a_taken_model_id_is_a_field_error(api_client, provider):
    ModelFactory.create(provider=provider, model_id="main")

    response = api_client.post(
        "/api/v1/models", {"model_id": "main", "provider_id": "openai", "name": "m", "kind": "llm"}, format="json"
    )

    assert response.status_code == 400
    assert "already exists" in response.json()["error"]["details"]["fields"]["model_id"]


def test_patch_moves_a_model_to_another_provider_and_clears_a_limit(api_client, workspace, provider):
    ModelFactory.create(provider=provider, model_id="main", context_window=8000)
    ModelProviderFactory.create(workspace=workspace, provider_id="azure")

    response = api_client.patch("/api/v1/models/main", {"provider_id": "azure", "context_window": None}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["provider_id"], response.json()["context_window"]) == ("azure", None)
    assert Model.objects.get().provider.provider_id == "azure"


def test_patch_refuses_null_for_what_cannot_be_empty(api_client, provider):
    ModelFactory.create(provider=provider, model_id="main")

    response = api_client.patch("/api/v1/models/main", {"kind": None, "model_id": "renamed"}, format="json")

    assert response.status_code == 400
    assert "kind" in response.json()["error"]["details"]["fields"]
    assert Model.objects.get().model_id == "main"


def test_another_workspaces_model_answers_404(api_client):
    ModelFactory.create(provider=ModelProviderFactory.create(workspace=WorkspaceFactory.create()), model_id="theirs")

    assert api_client.get("/api/v1/models/theirs").status_code == 404
    assert api_client.patch("/api/v1/models/theirs", {"name": "x"}, format="json").status_code == 404
    assert api_client.delete("/api/v1/models/theirs").status_code == 404
    assert api_client.get("/api/v1/models").json() == {"items": []}


def test_a_model_is_deleted(api_client, provider):
    ModelFactory.create(provider=provider, model_id="main")

    assert api_client.delete("/api/v1/models/main").status_code == 204
    assert not Model.objects.exists()


def test_a_model_a_knowledge_base_embeds_with_cannot_be_deleted(api_client, provider, workspace):
    model = ModelFactory.create(provider=provider, model_id="embedder", kind="embedding")
    KnowledgeBase.objects.create(workspace=workspace, kb_id="handbook", name="Handbook", embedding_model=model)

    response = api_client.delete("/api/v1/models/embedder")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "failed_precondition"
    assert "handbook" in response.json()["error"]["details"]["fields"]["model_id"]
    assert Model.objects.filter(model_id="embedder").exists()
