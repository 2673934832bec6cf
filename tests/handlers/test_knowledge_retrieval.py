"""`retrieve_knowledge_base` through the real proxy handlers of a running run: entries a runner can cite,
top_k and filters, hybrid ranking through the knowledge base's embedding model (and full text when that
provider fails), and the knowledge bases outside the run's snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

import tests.handlers.conftest as handlers_conftest
from langbot_sdk.protocol import RetrieveKnowledgeBaseResult
from resources.knowledge.ingestion import knowledge_document_ingest as ingest
from resources.knowledge.services import knowledge_document_upload
from resources.models import KnowledgeBase, KnowledgeDocument
from resources.tasks import knowledge_document_ingest
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.documents import pdf_bytes

KB_SCHEMA = [{"name": "kbs", "label": "Knowledge bases", "type": "knowledge-base-selector"}]


@pytest.fixture
def kb_run(host_run, monkeypatch):
    """A run whose config selects knowledge base `kb1` (allowed by the binding) of its workspace."""
    monkeypatch.setattr(handlers_conftest, "SCHEMA", KB_SCHEMA)
    # These tests commit (the run is real), so an upload's task would reach the broker, where a worker left
    # by an integration test could claim the document before `add` ingests it here.
    monkeypatch.setattr(knowledge_document_ingest, "delay", lambda document_id: None)

    def make(*, embedding_base_url: str | None = None, **run: Any) -> Any:
        workspace = WorkspaceFactory.create()
        model = None
        if embedding_base_url is not None:
            provider = ModelProviderFactory.create(workspace=workspace, base_url=embedding_base_url, max_retries=0)
            model = ModelFactory.create(workspace=workspace, provider=provider, model_id="embed", kind="embedding")
        kb = KnowledgeBase.objects.create(workspace=workspace, kb_id="kb1", name="Manual", embedding_model=model)
        KnowledgeBase.objects.create(workspace=workspace, kb_id="kb2", name="Not selected")
        made = host_run(
            workspace=workspace,
            config={"kbs": ["kb1", "kb2"]},
            resource_policy={"allowed_kb_ids": ["kb1"]},
            **run,
        )
        return made, kb

    return make


def add(kb: KnowledgeBase, name: str, data: bytes, metadata: dict[str, Any] | None = None) -> KnowledgeDocument:
    upload = SimpleUploadedFile(name, data)
    document = knowledge_document_upload(knowledge_base=kb, file=upload, name=name, mime_type="", metadata=metadata)
    ingest(document_id=str(document.document_id))
    return KnowledgeDocument.objects.get(pk=document.pk)


def test_a_runner_gets_passages_it_can_cite(kb_run):
    run, kb = kb_run()
    manual = add(kb, "manual.pdf", pdf_bytes("Intro page.", "To descale the machine, run the descale cycle."))
    add(kb, "other.txt", b"Unrelated words about gardens.")

    answer = RetrieveKnowledgeBaseResult.model_validate(
        run.call("retrieve_knowledge_base", kb_id="kb1", query_text="how to descale the machine", top_k=3)
    )

    assert len(answer.entries) == 1
    entry = answer.entries[0]
    assert "descale cycle" in entry.content
    assert entry.score is not None
    assert entry.score > 0
    assert entry.id == f"{manual.document_id}#0"
    assert entry.metadata["document_id"] == str(manual.document_id)
    assert entry.metadata["document_name"] == "manual.pdf"
    assert entry.metadata["page"] in (1, 2)


def test_top_k_and_filters_reach_the_search(kb_run):
    run, kb = kb_run()
    add(kb, "a.txt", b"coffee beans roast", {"lang": "en"})
    french = add(kb, "b.txt", b"coffee grains roast", {"lang": "fr"})
    add(kb, "c.txt", b"coffee cups", {"lang": "en"})

    limited = run.call("retrieve_knowledge_base", kb_id="kb1", query_text="coffee roast", top_k=1)
    filtered = run.call("retrieve_knowledge_base", kb_id="kb1", query_text="coffee", filters={"lang": "fr"})

    assert len(limited["entries"]) == 1
    assert [e["metadata"]["document_id"] for e in filtered["entries"]] == [str(french.document_id)]


def test_a_bad_filter_or_an_empty_query_is_invalid_argument(kb_run):
    run, _ = kb_run()

    assert run.refused("retrieve_knowledge_base", kb_id="kb1", query_text="x", filters={"a__b": 1}).error.code == (
        "invalid_argument"
    )
    assert run.refused("retrieve_knowledge_base", kb_id="kb1", query_text="  ").error.code == "invalid_argument"
    assert run.refused("retrieve_knowledge_base", kb_id="kb1", query_text="x", top_k=51).error.code == (
        "invalid_argument"
    )


def test_knowledge_bases_outside_the_snapshot_are_refused(kb_run):
    run, _ = kb_run()
    KnowledgeBase.objects.create(workspace=WorkspaceFactory.create(), kb_id="foreign", name="Other workspace")

    assert run.refused("retrieve_knowledge_base", kb_id="kb2", query_text="x").error.code == "unauthorized"
    assert run.refused("retrieve_knowledge_base", kb_id="foreign", query_text="x").error.code == "unauthorized"


def test_a_knowledge_base_deleted_during_the_run_is_not_found(kb_run):
    run, kb = kb_run()
    kb.delete()

    assert run.refused("retrieve_knowledge_base", kb_id="kb1", query_text="x").error.code == "not_found"


def test_with_an_embedding_model_the_query_is_embedded_and_ranking_is_hybrid(kb_run, fake):
    run, kb = kb_run(embedding_base_url=fake.base_url)
    fake.embedding_aliases = {"automobile": "car"}
    car = add(kb, "car.txt", b"Park the car in the garage")
    add(kb, "bike.txt", b"Lock the bike at the rack")

    answer = run.call("retrieve_knowledge_base", kb_id="kb1", query_text="automobile", top_k=2)

    assert answer["entries"][0]["metadata"]["document_id"] == str(car.document_id)
    assert "vector_score" in answer["entries"][0]["metadata"]
    assert fake.paths[-1] == "/v1/embeddings"
    assert fake.requests[-1]["input"] == ["automobile"]


def test_when_the_embedding_provider_fails_retrieval_answers_from_full_text(kb_run, fake):
    run, kb = kb_run(embedding_base_url=fake.base_url)
    doc = add(kb, "a.txt", b"invoice terms")
    fake.fail_embeddings(500, "embedding backend down")

    answer = run.call("retrieve_knowledge_base", kb_id="kb1", query_text="invoice", top_k=2)

    assert [e["metadata"]["document_id"] for e in answer["entries"]] == [str(doc.document_id)]
    assert "vector_score" not in answer["entries"][0]["metadata"]
