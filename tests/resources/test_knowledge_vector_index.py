"""The knowledge base's vector index (resources/knowledge/vectors.py): its answers match exact cosine search
on a small corpus, it follows deleted documents at once (a deleted document's chunks are never returned),
and a workspace's search never returns another workspace's chunks."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from resources.knowledge import vectors
from resources.knowledge.ingestion import knowledge_document_ingest as ingest
from resources.knowledge.search import chunks_search
from resources.knowledge.vectors import exact_ranked, vector_cache_clear, vector_index
from resources.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument
from resources.tasks import knowledge_document_ingest
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, embedding_of, fake_openai

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def index_dir(settings, tmp_path, monkeypatch) -> Iterator[None]:
    # Each test's index files in a directory of its own, and no maps left from another test.
    settings.KNOWLEDGE_INDEX_DIR = str(tmp_path / "knowledge-index")
    monkeypatch.setattr(knowledge_document_ingest, "delay", lambda document_id: None)
    vector_cache_clear()
    yield
    vector_cache_clear()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


def _seeded_kb(workspace: Any, vectors_: np.ndarray) -> KnowledgeBase:
    kb = KnowledgeBase.objects.create(workspace=workspace, kb_id="seeded", name="seeded")
    document = KnowledgeDocument.objects.create(
        workspace=workspace, knowledge_base=kb, name="seed.txt", mime_type="text/plain", status="ready"
    )
    KnowledgeChunk.objects.bulk_create(
        KnowledgeChunk(
            workspace=workspace,
            knowledge_base=kb,
            document=document,
            position=i,
            text=f"chunk {i}",
            metadata={},
            token_count=2,
            embedding=vector.astype(np.float32).tobytes(),
        )
        for i, vector in enumerate(vectors_)
    )
    KnowledgeBase.objects.filter(pk=kb.pk).update(index_version=1)
    kb.refresh_from_db()
    return kb


def test_the_index_answers_what_exact_search_answers_on_a_small_corpus(workspace):
    rng = np.random.default_rng(3)
    topics = rng.standard_normal((20, 32)).astype(np.float32)
    corpus = topics[rng.integers(0, 20, 400)] + 0.3 * rng.standard_normal((400, 32)).astype(np.float32)
    kb = _seeded_kb(workspace, corpus)
    queries = topics[:10] + 0.1 * rng.standard_normal((10, 32)).astype(np.float32)

    for query in queries:
        entries = chunks_search(knowledge_base=kb, query_text="", top_k=5, query_vector=query, vector_only=True)
        exact = exact_ranked(kb, query, limit=5)

        assert [e["metadata"]["position"] for e in entries] == [
            KnowledgeChunk.objects.get(pk=chunk_id).position for chunk_id, _ in exact
        ]
        assert [e["score"] for e in entries] == pytest.approx([score for _, score in exact], abs=1e-4)


def _vector_kb(client: Any, workspace: Any, fake: FakeOpenAI, kb_id: str) -> None:
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(provider=provider, model_id="embed", name="fake-embed", kind="embedding")
    client.post(
        "/api/v1/knowledge-bases", {"kb_id": kb_id, "name": kb_id, "embedding_model_id": "embed"}, format="json"
    )


def _add(client: Any, kb_id: str, name: str, text: str) -> str:
    file = io.BytesIO(text.encode())
    file.name = name
    created = client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", {"file": file}, format="multipart").json()
    ingest(document_id=created["document_id"])
    return str(created["document_id"])


def _found(kb_id: str, workspace: Any, text: str) -> list[str]:
    kb = KnowledgeBase.objects.get(kb_id=kb_id, workspace=workspace)
    query = np.asarray(embedding_of(text), dtype=np.float32)
    entries = chunks_search(knowledge_base=kb, query_text=text, top_k=10, query_vector=query)
    return [e["metadata"]["document_id"] for e in entries]


def test_a_deleted_document_is_gone_from_the_index_when_the_delete_commits(
    api_client, workspace, fake, monkeypatch, django_capture_on_commit_callbacks
):
    _vector_kb(api_client, workspace, fake, "vec")
    with django_capture_on_commit_callbacks(execute=True):
        kept = _add(api_client, "vec", "a.txt", "green tea leaves")
        deleted = _add(api_client, "vec", "b.txt", "green tea")
    assert set(_found("vec", workspace, "green tea")) == {kept, deleted}

    with django_capture_on_commit_callbacks(execute=True):
        assert api_client.delete(f"/api/v1/knowledge-bases/vec/documents/{deleted}").status_code == 204

    # Synced by the delete itself: the search finds the file current and does not sync again.
    def no_sync(knowledge_base: KnowledgeBase) -> None:
        raise AssertionError("the index was not synced when the delete committed")

    monkeypatch.setattr(vectors, "vector_index_sync", no_sync)
    assert _found("vec", workspace, "green tea") == [kept]
    kb = KnowledgeBase.objects.get(kb_id="vec", workspace=workspace)
    index = vector_index(kb).index
    assert index is not None
    assert set(np.asarray(index.keys).tolist()) == set(
        KnowledgeChunk.objects.filter(knowledge_base=kb).values_list("id", flat=True)
    )


def test_a_deleted_document_is_never_returned_even_before_the_index_syncs(api_client, workspace, fake):
    _vector_kb(api_client, workspace, fake, "vec")
    kept = _add(api_client, "vec", "a.txt", "green tea leaves")
    deleted = _add(api_client, "vec", "b.txt", "green tea")
    assert set(_found("vec", workspace, "green tea")) == {kept, deleted}

    # The delete's on-commit sync does not run inside the test's transaction: the search syncs first.
    api_client.delete(f"/api/v1/knowledge-bases/vec/documents/{deleted}")

    assert _found("vec", workspace, "green tea") == [kept]


def test_another_workspaces_chunks_are_never_returned(api_client, api_client_for, workspace, fake):
    other = WorkspaceFactory.create()
    other_client = api_client_for(other)
    _vector_kb(api_client, workspace, fake, "vec")
    _vector_kb(other_client, other, fake, "vec")
    mine = _add(api_client, "vec", "a.txt", "green tea")
    theirs = _add(other_client, "vec", "a.txt", "green tea and green tea leaves")

    assert _found("vec", workspace, "green tea") == [mine]
    assert _found("vec", other, "green tea") == [theirs]
    # The hit test (POST .../search) runs the same retrieval, with the vector alone too.
    answer = api_client.post(
        "/api/v1/knowledge-bases/vec/search", {"query": "green tea", "mode": "vector"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert [hit["document_id"] for hit in answer.json()["hits"]] == [mine]
