"""REST of knowledge bases and their documents: CRUD scoped to the caller's workspace, the embedding model
check, uploads answered 202 and queued for ingestion, the upload cap (413) and unsupported types (415),
and deletes that take chunks and artifacts with them."""

from __future__ import annotations

import io
from typing import Any

import pytest

from artifacts.models import Artifact
from artifacts.storage import artifact_storage
from resources.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument
from resources.tasks import knowledge_document_ingest
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.documents import pdf_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch) -> list[str]:
    """The ids sent to the ingestion task (nothing reaches a broker)."""
    sent: list[str] = []
    monkeypatch.setattr(knowledge_document_ingest, "delay", sent.append)
    return sent


def upload(api_client: Any, kb_id: str, name: str, data: bytes, content_type: str = "", **fields: str) -> Any:
    file = io.BytesIO(data)
    file.name = name
    return api_client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", {"file": file, **fields}, format="multipart")


def test_create_a_knowledge_base_and_read_it_back(api_client):
    response = api_client.post("/api/v1/knowledge-bases", {"name": "Product Docs"}, format="json")

    assert response.status_code == 201, response.content
    created = response.json()
    assert created["kb_id"] == "product-docs"
    assert (created["embedding_model_id"], created["document_count"], created["description"]) == (None, 0, "")
    assert api_client.get("/api/v1/knowledge-bases/product-docs").json() == created
    assert api_client.get("/api/v1/knowledge-bases").json() == {"items": [created]}


def test_an_embedding_model_of_the_workspace_is_accepted_and_others_are_named(api_client, workspace):
    provider = ModelProviderFactory.create(workspace=workspace)
    ModelFactory.create(provider=provider, model_id="embed", kind="embedding")
    ModelFactory.create(provider=provider, model_id="chat", kind="llm")
    theirs = ModelProviderFactory.create(workspace=WorkspaceFactory.create())
    ModelFactory.create(provider=theirs, model_id="their-embed", kind="embedding")

    ok = api_client.post("/api/v1/knowledge-bases", {"name": "a", "embedding_model_id": "embed"}, format="json")
    wrong_kind = api_client.post("/api/v1/knowledge-bases", {"name": "b", "embedding_model_id": "chat"}, format="json")
    foreign = api_client.post(
        "/api/v1/knowledge-bases", {"name": "c", "embedding_model_id": "their-embed"}, format="json"
    )

    assert ok.status_code == 201
    assert ok.json()["embedding_model_id"] == "embed"
    assert wrong_kind.status_code == 400
    assert "embedding" in wrong_kind.json()["error"]["details"]["fields"]["embedding_model_id"]
    assert foreign.status_code == 400
    assert foreign.json()["error"]["code"] == "invalid_argument"


def test_bad_bodies_name_their_fields(api_client):
    response = api_client.post(
        "/api/v1/knowledge-bases", {"name": "", "colour": "red", "kb_id": "Not A Slug"}, format="json"
    )

    fields = response.json()["error"]["details"]["fields"]
    assert response.status_code == 400
    assert {"name", "colour", "kb_id"} <= set(fields)


def test_a_taken_id_is_refused(api_client):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "x"}, format="json")

    response = api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "y"}, format="json")

    assert response.status_code == 400
    assert "kb_id" in response.json()["error"]["details"]["fields"]


def test_patch_changes_the_fields_given_and_the_id_stays(api_client):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "x", "description": "d"}, format="json")

    patched = api_client.patch("/api/v1/knowledge-bases/docs", {"name": "New"}, format="json")
    renamed = api_client.patch("/api/v1/knowledge-bases/docs", {"kb_id": "other"}, format="json")

    assert patched.status_code == 200
    assert (patched.json()["name"], patched.json()["description"]) == ("New", "d")
    assert renamed.status_code == 400


def test_another_workspaces_knowledge_base_is_not_found(api_client):
    KnowledgeBase.objects.create(workspace=WorkspaceFactory.create(), kb_id="theirs", name="t")

    assert api_client.get("/api/v1/knowledge-bases/theirs").status_code == 404
    assert api_client.get("/api/v1/knowledge-bases/theirs").json()["error"]["code"] == "not_found"
    assert api_client.delete("/api/v1/knowledge-bases/theirs").status_code == 404
    assert upload(api_client, "theirs", "a.txt", b"hello").status_code == 404
    assert api_client.get("/api/v1/knowledge-bases").json() == {"items": []}


def test_an_upload_is_accepted_queued_and_listed(api_client, queued, django_capture_on_commit_callbacks):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")

    with django_capture_on_commit_callbacks(execute=True):
        response = upload(api_client, "docs", "guide.pdf", pdf_bytes("Hello"), metadata='{"team": "blue"}')

    assert response.status_code == 202, response.content
    document = response.json()
    assert (document["status"], document["progress"], document["error"]) == ("queued", 0, "")
    assert (document["mime_type"], document["name"], document["metadata"]) == (
        "application/pdf",
        "guide.pdf",
        {"team": "blue"},
    )
    assert queued == [document["document_id"]]
    listed = api_client.get("/api/v1/knowledge-bases/docs/documents").json()["items"]
    assert [item["document_id"] for item in listed] == [document["document_id"]]
    detail = api_client.get(f"/api/v1/knowledge-bases/docs/documents/{document['document_id']}")
    assert detail.json() == document
    artifact = Artifact.objects.get(artifact_id=document["artifact_id"])
    assert artifact.source == Artifact.Source.UPLOAD
    assert artifact.size == document["size"]


def test_an_unsupported_type_is_refused_with_415(api_client, queued):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")

    response = upload(api_client, "docs", "song.mp3", b"ID3\x03\x00binary")

    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert queued == []
    assert not KnowledgeDocument.objects.exists()
    assert not Artifact.objects.exists()


def test_an_upload_without_a_file_or_with_bad_metadata_names_the_field(api_client, queued):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")

    missing = api_client.post("/api/v1/knowledge-bases/docs/documents", {"name": "x"}, format="multipart")
    bad = upload(api_client, "docs", "a.txt", b"hi", metadata="[1, 2]")

    assert missing.status_code == 400
    assert "file" in missing.json()["error"]["details"]["fields"]
    assert bad.status_code == 400
    assert "metadata" in bad.json()["error"]["details"]["fields"]


class _LazyBody:
    """A request body of `size` bytes produced on demand, counting what the server reads."""

    def __init__(self, head: bytes, size: int) -> None:
        self.head, self.size, self.read_bytes = head, size, 0

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.read_bytes
        n = left if n is None or n < 0 else min(n, left)
        start = self.read_bytes
        self.read_bytes += n
        if start < len(self.head):
            part = self.head[start : start + n]
            return part + b"x" * (n - len(part))
        return b"x" * n

    def readline(self, n: int = -1) -> bytes:
        return self.read(min(n, 65536) if n and n > 0 else 65536)


def _multipart_head(boundary: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()


def test_a_200_mb_upload_is_refused_with_413_before_it_is_read(api_client, queued):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")
    boundary = "b0undary"
    body = _LazyBody(_multipart_head(boundary), 200 * 1024 * 1024)

    response = api_client.generic(
        "POST",
        "/api/v1/knowledge-bases/docs/documents",
        content_type=f"multipart/form-data; boundary={boundary}",
        **{"wsgi.input": body, "CONTENT_LENGTH": str(body.size)},
    )

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert response.json()["error"]["details"]["limit_bytes"] == 50 * 1024 * 1024
    assert body.read_bytes < 1024 * 1024
    assert not KnowledgeDocument.objects.exists()
    assert not Artifact.objects.exists()


def test_a_file_over_the_cap_is_stopped_while_streaming_even_if_the_length_lies(api_client, queued, settings):
    settings.KNOWLEDGE_DOCUMENT_MAX_BYTES = 256 * 1024
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")
    boundary = "b0undary"
    # The declared length fits under cap + framing; the file part itself is over the cap.
    body = _LazyBody(_multipart_head(boundary), 300 * 1024)

    response = api_client.generic(
        "POST",
        "/api/v1/knowledge-bases/docs/documents",
        content_type=f"multipart/form-data; boundary={boundary}",
        **{"wsgi.input": body, "CONTENT_LENGTH": str(body.size)},
    )

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert not KnowledgeDocument.objects.exists()


def _ingested(api_client: Any, kb_id: str, name: str, data: bytes) -> dict[str, Any]:
    from resources.knowledge.ingestion import knowledge_document_ingest as ingest

    document = upload(api_client, kb_id, name, data).json()
    ingest(document_id=document["document_id"])
    return api_client.get(f"/api/v1/knowledge-bases/{kb_id}/documents/{document['document_id']}").json()


def test_deleting_a_document_removes_its_chunks_and_artifact(api_client, queued, django_capture_on_commit_callbacks):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")
    document = _ingested(api_client, "docs", "a.txt", b"alpha beta\n\ngamma delta")
    kept = _ingested(api_client, "docs", "b.txt", b"kept text")
    artifact = Artifact.objects.get(artifact_id=document["artifact_id"])
    assert document["status"] == "ready"
    assert document["chunk_count"] >= 1
    assert artifact_storage().exists(artifact.storage_key)

    with django_capture_on_commit_callbacks(execute=True):
        response = api_client.delete(f"/api/v1/knowledge-bases/docs/documents/{document['document_id']}")

    assert response.status_code == 204
    assert not KnowledgeChunk.objects.filter(document__document_id=document["document_id"]).exists()
    assert not Artifact.objects.filter(pk=artifact.pk).exists()
    assert not artifact_storage().exists(artifact.storage_key)
    assert KnowledgeChunk.objects.filter(document__document_id=kept["document_id"]).count() == kept["chunk_count"]
    again = api_client.get(f"/api/v1/knowledge-bases/docs/documents/{document['document_id']}")
    assert again.status_code == 404


def test_deleting_a_knowledge_base_removes_everything_of_it(api_client, queued, django_capture_on_commit_callbacks):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")
    document = _ingested(api_client, "docs", "a.md", b"# Title\n\nSome text")
    key = Artifact.objects.get(artifact_id=document["artifact_id"]).storage_key

    with django_capture_on_commit_callbacks(execute=True):
        response = api_client.delete("/api/v1/knowledge-bases/docs")

    assert response.status_code == 204
    assert not KnowledgeBase.objects.exists()
    assert not KnowledgeDocument.objects.exists()
    assert not KnowledgeChunk.objects.exists()
    assert not Artifact.objects.exists()
    assert not artifact_storage().exists(key)


def test_a_malformed_document_id_is_not_found(api_client):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")

    response = api_client.get("/api/v1/knowledge-bases/docs/documents/not-a-uuid")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_schema_documents_the_knowledge_endpoints(api_client):
    schema = api_client.get("/api/schema/?format=json").json()

    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/knowledge-bases/{kb_id}/documents"])
    upload_responses = paths["/api/v1/knowledge-bases/{kb_id}/documents"]["post"]["responses"]
    assert {"202", "413", "415"} <= set(upload_responses)
    assert {"get", "patch", "delete"} <= set(paths["/api/v1/knowledge-bases/{kb_id}"])
