"""Ingestion of real documents of each type through the task: status and progress, chunks with their page
and heading, a failure message for documents that cannot be read, embeddings from the knowledge base's
model (and its errors), and one document ingested by a real Celery worker."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from resources.knowledge.ingestion import knowledge_document_ingest as ingest
from resources.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument
from resources.tasks import knowledge_document_ingest
from tests.factories import ModelFactory, ModelProviderFactory
from tests.fakes.documents import docx_bytes, html_bytes, pdf_bytes, pdf_corrupt, pdf_encrypted
from tests.fakes.openai_server import EMBEDDING_DIMENSIONS, FakeOpenAI, fake_openai

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@pytest.fixture
def kb(api_client, monkeypatch) -> str:
    monkeypatch.setattr(knowledge_document_ingest, "delay", lambda document_id: None)
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")
    return "docs"


def ingested(api_client: Any, name: str, data: bytes, kb_id: str = "docs") -> dict[str, Any]:
    file = io.BytesIO(data)
    file.name = name
    created = api_client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", {"file": file}, format="multipart")
    assert created.status_code == 202, created.content
    ingest(document_id=created.json()["document_id"])
    return api_client.get(f"/api/v1/knowledge-bases/{kb_id}/documents/{created.json()['document_id']}").json()


def chunks_of(document: dict[str, Any]) -> list[KnowledgeChunk]:
    return list(KnowledgeChunk.objects.filter(document__document_id=document["document_id"]).order_by("position"))


def test_a_multi_page_pdf_becomes_chunks_that_know_their_pages(api_client, kb):
    pages = [f"Page {n} talks about topic number {n}. " + "Filler sentence here. " * 30 for n in range(1, 4)]

    document = ingested(api_client, "report.pdf", pdf_bytes(*pages))

    assert (document["status"], document["progress"], document["error"]) == ("ready", 100, "")
    assert document["page_count"] == 3
    chunks = chunks_of(document)
    assert document["chunk_count"] == len(chunks) >= 1
    assert chunks[0].metadata["page"] == 1
    assert max(c.metadata.get("page_end", c.metadata["page"]) for c in chunks) == 3
    assert "topic number 2" in " ".join(c.text for c in chunks)


def test_a_docx_keeps_headings_paragraphs_and_tables(api_client, kb):
    data = docx_bytes(
        title="Handbook",
        sections=[("Holidays", ["Staff get 25 days of leave."]), ("Expenses", ["Receipts within 30 days."])],
        table=[["City", "Allowance"], ["Berlin", "40 EUR"]],
    )

    chunks = chunks_of(ingested(api_client, "handbook.docx", data))

    by_heading = {c.metadata["heading"]: c for c in chunks}
    assert "25 days of leave" in by_heading["Holidays"].text
    assert by_heading["Holidays"].metadata["headings"] == ["Handbook", "Holidays"]
    assert "Berlin | 40 EUR" in by_heading["Expenses"].text


def test_html_keeps_visible_text_and_headings_and_drops_scripts(api_client, kb):
    data = html_bytes(title="FAQ", sections=[("Shipping", "We ship worldwide."), ("Returns", "Within 14 days.")])

    chunks = chunks_of(ingested(api_client, "faq.html", data))

    text = " ".join(c.text for c in chunks)
    assert "We ship worldwide." in text
    assert "do not index me" not in text
    assert "color" not in text
    assert {c.metadata["heading"] for c in chunks} >= {"Shipping", "Returns"}


def test_markdown_sections_and_plain_text_paragraphs(api_client, kb):
    md = ingested(api_client, "notes.md", b"# Setup\n\nInstall the agent.\n\n## Config\n\nSet the key.\n")
    txt = ingested(api_client, "plain.txt", "第一段。\n\nSecond paragraph.".encode())

    assert [(c.metadata["heading"], c.text) for c in chunks_of(md)] == [
        ("Setup", "Install the agent."),
        ("Config", "Set the key."),
    ]
    assert [c.text for c in chunks_of(txt)] == ["第一段。\n\nSecond paragraph."]
    assert txt["mime_type"] == "text/plain"
    assert md["mime_type"] == "text/markdown"


def test_a_long_text_is_cut_into_overlapping_chunks(api_client, kb):
    sentences = [f"Sentence number {n} says something distinct." for n in range(300)]

    chunks = chunks_of(ingested(api_client, "long.txt", " ".join(sentences).encode()))

    assert len(chunks) > 3
    assert all(c.token_count <= 400 for c in chunks)
    # The next chunk starts with the end of the previous one.
    assert chunks[1].text.split(".")[0] in chunks[0].text


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("broken.pdf", pdf_corrupt(), "The PDF cannot be read"),
        ("locked.pdf", pdf_encrypted("secret plans"), "encrypted"),
        ("empty.txt", b"   \n\n  ", "no extractable text"),
        ("fake.docx", b"this is not a zip", "The DOCX cannot be read"),
    ],
)
def test_a_document_that_cannot_be_read_fails_with_a_message(api_client, kb, name, data, message):
    document = ingested(api_client, name, data)

    assert document["status"] == "failed"
    assert message in document["error"]
    assert document["chunk_count"] == 0
    assert not chunks_of(document)


def test_a_failed_document_leaves_the_others_searchable(api_client, kb):
    good = ingested(api_client, "good.txt", b"good text")
    ingested(api_client, "broken.pdf", pdf_corrupt())

    assert api_client.get(f"/api/v1/knowledge-bases/docs/documents/{good['document_id']}").json()["status"] == "ready"


def test_running_the_task_twice_does_nothing_the_second_time(api_client, kb):
    document = ingested(api_client, "a.txt", b"alpha")
    before = KnowledgeBase.objects.get(kb_id="docs").index_version

    ingest(document_id=document["document_id"])

    assert len(chunks_of(document)) == 1
    assert KnowledgeBase.objects.get(kb_id="docs").index_version == before


def _embedding_kb(api_client: Any, workspace: Any, fake: FakeOpenAI, kb_id: str = "vec") -> None:
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(provider=provider, model_id="embed", name="fake-embed", kind="embedding")
    body = {"kb_id": kb_id, "name": "Vectors", "embedding_model_id": "embed"}
    assert api_client.post("/api/v1/knowledge-bases", body, format="json").status_code == 201


def test_with_an_embedding_model_every_chunk_gets_a_vector(api_client, kb, workspace, fake):
    _embedding_kb(api_client, workspace, fake)

    document = ingested(api_client, "a.md", b"# One\n\nfirst part\n\n# Two\n\nsecond part", kb_id="vec")

    chunks = chunks_of(document)
    assert document["status"] == "ready"
    assert len(chunks) == 2
    vectors = [np.frombuffer(bytes(c.embedding or b""), dtype=np.float32) for c in chunks]
    assert all(v.shape == (EMBEDDING_DIMENSIONS,) for v in vectors)
    embedded = [r for r, p in zip(fake.requests, fake.paths, strict=True) if p == "/v1/embeddings"]
    assert embedded[0]["model"] == "fake-embed"
    assert embedded[0]["input"] == ["One\n\nfirst part", "Two\n\nsecond part"]


def test_an_embedding_provider_error_fails_the_document_with_the_providers_words(api_client, kb, workspace, fake):
    _embedding_kb(api_client, workspace, fake)
    fake.fail_embeddings(400, "model not loaded")

    document = ingested(api_client, "a.txt", b"some text", kb_id="vec")

    assert document["status"] == "failed"
    assert "embed" in document["error"]
    assert "model not loaded" in document["error"]
    assert "sk-test-key" not in document["error"]


def test_changing_the_embedding_model_queues_every_document_again(api_client, kb, workspace, fake, monkeypatch,
                                                                  django_capture_on_commit_callbacks):  # fmt: skip
    document = ingested(api_client, "a.txt", b"some text")
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(provider=provider, model_id="embed", kind="embedding")
    sent: list[str] = []
    monkeypatch.setattr(knowledge_document_ingest, "delay", sent.append)

    with django_capture_on_commit_callbacks(execute=True):
        response = api_client.patch("/api/v1/knowledge-bases/docs", {"embedding_model_id": "embed"}, format="json")
    assert response.status_code == 200
    assert sent == [document["document_id"]]
    ingest(document_id=sent[0])

    assert all(c.embedding is not None for c in chunks_of(document))
    assert KnowledgeDocument.objects.get(document_id=document["document_id"]).status == "ready"


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_ingests_an_upload_and_progress_reaches_ready(worker, api_client):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "live", "name": "Live"}, format="json")
    file = io.BytesIO(pdf_bytes("Worker page one.", "Worker page two."))
    file.name = "live.pdf"

    created = api_client.post("/api/v1/knowledge-bases/live/documents", {"file": file}, format="multipart")

    assert created.status_code == 202
    url = f"/api/v1/knowledge-bases/live/documents/{created.json()['document_id']}"
    deadline = time.monotonic() + 30
    seen = set()
    while (detail := api_client.get(url).json())["status"] not in ("ready", "failed"):
        seen.add(detail["status"])
        assert time.monotonic() < deadline, detail
        time.sleep(0.1)
    assert detail["status"] == "ready", detail["error"]
    assert (detail["page_count"], detail["progress"]) == (2, 100)
    assert seen <= {"queued", "processing"}
