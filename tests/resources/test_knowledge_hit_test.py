"""The knowledge base hit test — `POST /api/v1/knowledge-bases/{kb_id}/search` and the query box on the
knowledge base's admin page — and duplicate uploads, which are refused (409 over REST, a form error in admin)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from resources.knowledge.ingestion import knowledge_document_ingest as ingest
from resources.knowledge.services import knowledge_document_upload
from resources.models import KnowledgeBase, KnowledgeDocument
from resources.tasks import knowledge_document_ingest
from tests.factories import ModelFactory, ModelProviderFactory, UserFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, fake_openai

pytestmark = pytest.mark.django_db

ROUTER = b"To reset the router, hold the reset button for ten seconds until the light blinks."
KETTLE = b"Descale the kettle every month with citric acid and rinse it twice."
PRINTER = b"The printer jams when the paper tray is overfilled; take out half the stack."


@pytest.fixture(autouse=True)
def no_broker(monkeypatch) -> None:
    monkeypatch.setattr(knowledge_document_ingest, "delay", lambda document_id: None)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


def add(kb: KnowledgeBase, name: str, data: bytes) -> KnowledgeDocument:
    made = knowledge_document_upload(knowledge_base=kb, file=SimpleUploadedFile(name, data), name=name, mime_type="")
    ingest(document_id=str(made.document_id))
    return KnowledgeDocument.objects.get(pk=made.pk)


@pytest.fixture
def kb(workspace) -> KnowledgeBase:
    kb = KnowledgeBase.objects.create(workspace=workspace, kb_id="help", name="Help desk")
    for name, data in (("router.txt", ROUTER), ("kettle.txt", KETTLE), ("printer.txt", PRINTER)):
        add(kb, name, data)
    return kb


@pytest.fixture
def vector_kb(workspace, fake) -> KnowledgeBase:
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    model = ModelFactory.create(provider=provider, model_id="embed", name="fake-embed", kind="embedding")
    kb = KnowledgeBase.objects.create(workspace=workspace, kb_id="vec", name="Vectors", embedding_model=model)
    for name, data in (("router.txt", ROUTER), ("kettle.txt", KETTLE), ("printer.txt", PRINTER)):
        add(kb, name, data)
    return kb


def search(api_client: Any, kb_id: str, **body: Any) -> Any:
    return api_client.post(f"/api/v1/knowledge-bases/{kb_id}/search", body, format="json")


def test_a_query_answers_ranked_chunks_with_scores_and_document_names(api_client, kb):
    response = search(api_client, "help", query="how do I reset the router", top_k=3)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["query"], body["mode"], body["embedding_error"]) == ("how do I reset the router", "full_text", None)
    first = body["hits"][0]
    assert (first["rank"], first["document_name"], first["position"]) == (1, "router.txt", 0)
    assert first["content"] == ROUTER.decode()
    assert first["score"] > 0
    assert first["document_id"] == str(KnowledgeDocument.objects.get(name="router.txt").document_id)
    assert first["chunk_id"] == f"{first['document_id']}#0"
    assert "kettle.txt" not in [hit["document_name"] for hit in body["hits"]]


def test_top_k_caps_the_hits_best_first(api_client, kb):
    body = search(api_client, "help", query="the", top_k=1).json()

    assert len(body["hits"]) == 1
    assert body["hits"][0]["rank"] == 1


def test_a_query_that_matches_nothing_answers_no_hits(api_client, kb):
    body = search(api_client, "help", query="photosynthesis").json()

    assert body["hits"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "router", "top_k": 0}, "top_k"),
        ({"query": "router", "top_k": 51}, "top_k"),
        ({"query": "router", "top_k": "5"}, "top_k"),
        ({"query": "router", "mode": "psychic"}, "mode"),
        ({"query": "router", "mode": "vector"}, "mode"),  # no embedding model
        ({"query": "router", "colour": "red"}, "colour"),
    ],
)
def test_bad_queries_answer_400_naming_the_field(api_client, kb, body, field):
    response = search(api_client, "help", **body)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_argument"
    assert field in response.json()["error"]["details"]["fields"]


def test_another_workspaces_knowledge_base_is_not_found(api_client, api_client_for, kb):
    stranger = api_client_for(WorkspaceFactory.create())

    response = search(stranger, "help", query="router")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_with_an_embedding_model_the_default_is_hybrid_and_each_ranking_can_be_asked_for(api_client, vector_kb):
    hybrid = search(api_client, "vec", query="reset the router button").json()
    vector = search(api_client, "vec", query="reset the router button", mode="vector").json()
    full_text = search(api_client, "vec", query="reset the router button", mode="full_text").json()

    assert (hybrid["mode"], vector["mode"], full_text["mode"]) == ("hybrid", "vector", "full_text")
    for body in (hybrid, vector, full_text):
        assert body["hits"][0]["document_name"] == "router.txt"
    assert hybrid["hits"][0]["vector_score"] is not None
    assert hybrid["hits"][0]["full_text_score"] is not None
    assert vector["hits"][0]["full_text_score"] is None
    assert vector["hits"][0]["score"] == pytest.approx(vector["hits"][0]["vector_score"])
    assert len(vector["hits"]) == 3  # every chunk has a cosine


def test_a_failed_embedding_falls_back_to_full_text_and_says_why(api_client, vector_kb, fake):
    fake.fail_embeddings(500, "model not loaded")

    body = search(api_client, "vec", query="reset the router").json()

    assert body["mode"] == "full_text"
    assert "model not loaded" in body["embedding_error"]
    assert body["hits"][0]["document_name"] == "router.txt"


def test_a_vector_query_whose_embedding_fails_answers_502(api_client, vector_kb, fake):
    fake.fail_embeddings(500, "model not loaded")

    response = search(api_client, "vec", query="reset the router", mode="vector")

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "provider.error"
    assert "model not loaded" in response.json()["error"]["message"]


# --- duplicates: refused ---------------------------------------------------------------------------------


def upload(api_client: Any, kb_id: str, name: str, data: bytes) -> Any:
    file = io.BytesIO(data)
    file.name = name
    return api_client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", {"file": file}, format="multipart")


def test_uploading_the_same_bytes_again_is_refused_naming_the_document(api_client, kb):
    response = upload(api_client, "help", "router-copy.txt", ROUTER)

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "knowledge.document_duplicate"
    original = KnowledgeDocument.objects.get(name="router.txt")
    assert error["details"] == {"document_id": str(original.document_id), "name": "router.txt"}
    assert KnowledgeDocument.objects.filter(knowledge_base=kb).count() == 3


def test_the_same_file_may_go_into_another_knowledge_base_or_again_after_a_failure(api_client, kb, workspace):
    KnowledgeBase.objects.create(workspace=workspace, kb_id="other", name="Other")
    KnowledgeDocument.objects.filter(name="kettle.txt").update(status="failed", error="provider down")

    elsewhere = upload(api_client, "other", "router.txt", ROUTER)
    again = upload(api_client, "help", "kettle.txt", KETTLE)

    assert elsewhere.status_code == again.status_code == 202


# --- admin ------------------------------------------------------------------------------------------------


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_the_knowledge_base_page_has_a_query_box_that_shows_the_hits(admin_client, kb):
    url = f"/admin/resources/knowledgebase/{kb.pk}/change/"

    empty = admin_client.get(url).content.decode()
    page = admin_client.get(url, {"hit_query": "printer paper jams", "hit_top_k": "2"}).content.decode()

    assert 'name="hit_query"' in empty
    assert 'class="hit"' not in empty
    assert 'class="hit"' in page
    assert "printer.txt" in page
    assert PRINTER.decode().split(";")[0] in page
    assert "ranked by full_text" in page


def test_the_query_box_says_what_is_wrong_with_a_query(admin_client, kb):
    page = admin_client.get(
        f"/admin/resources/knowledgebase/{kb.pk}/change/", {"hit_query": "router", "hit_mode": "vector"}
    ).content.decode()

    assert "needs an embedding model" in page


def test_the_admin_refuses_a_file_the_knowledge_base_already_holds(admin_client, kb):
    form = {
        "name": kb.name, "description": "", "embedding_model": "", "_save": "Save",
        "documents-TOTAL_FORMS": "0", "documents-INITIAL_FORMS": "0", "documents-MIN_NUM_FORMS": "0",
        "documents-MAX_NUM_FORMS": "1000", "upload": SimpleUploadedFile("again.txt", KETTLE),
    }  # fmt: skip

    response = admin_client.post(f"/admin/resources/knowledgebase/{kb.pk}/change/", form)

    assert response.status_code == 200
    assert "kettle.txt" in str(response.context["adminform"].form.errors["upload"])
    assert KnowledgeDocument.objects.filter(knowledge_base=kb).count() == 3
