"""Retrieval from a knowledge base on the database in use (PostgreSQL full text with ts_rank_cd, SQLite
FTS5 with bm25): ranking, CJK text, filters, top_k, hybrid ranking with a fake embedding provider, and
the vector cache following document changes, and (PostgreSQL) the term counts that keep a very common
word out of the match."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from django.db import connection

from resources.knowledge import search as search_module
from resources.knowledge.ingestion import knowledge_document_ingest as ingest
from resources.knowledge.search import FilterError, chunks_search, matching_terms
from resources.knowledge.sql import full_text_ranked
from resources.knowledge.term_counts import term_counts_get
from resources.models import KnowledgeBase, KnowledgeDocument
from resources.providers.embeddings import query_embed
from resources.tasks import knowledge_document_ingest
from tests.factories import ModelFactory, ModelProviderFactory
from tests.fakes.openai_server import FakeOpenAI, embedding_of, fake_openai

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@pytest.fixture(autouse=True)
def no_broker(monkeypatch) -> None:
    monkeypatch.setattr(knowledge_document_ingest, "delay", lambda document_id: None)


def add(api_client: Any, kb_id: str, name: str, text: str, metadata: str = "") -> str:
    file = io.BytesIO(text.encode())
    file.name = name
    fields: dict[str, Any] = {"file": file, **({"metadata": metadata} if metadata else {})}
    created = api_client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", fields, format="multipart").json()
    ingest(document_id=created["document_id"])
    return str(created["document_id"])


def search(kb_id: str, query: str, **kwargs: Any) -> list[dict[str, Any]]:
    return chunks_search(
        knowledge_base=KnowledgeBase.objects.get(kb_id=kb_id), query_text=query, top_k=kwargs.pop("top_k", 5), **kwargs
    )


@pytest.fixture
def docs(api_client) -> dict[str, str]:
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")
    reset = (
        "# Passwords\n\nTo reset a password, open settings and choose reset password. The password reset link expires."
    )
    vpn = "The VPN client connects to the office network. A password is needed once."
    lunch = "<h1>Canteen</h1><p>Lunch is served from noon in the canteen.</p>"
    return {
        "reset": add(api_client, "docs", "reset.md", reset, '{"team": "it"}'),
        "vpn": add(api_client, "docs", "vpn.txt", vpn, '{"team": "it"}'),
        "lunch": add(api_client, "docs", "lunch.html", lunch, '{"team": "hr"}'),
    }


def test_the_chunk_that_says_most_about_the_query_comes_first(docs):
    entries = search("docs", "how do I reset my password?")

    assert [e["metadata"]["document_id"] for e in entries] == [docs["reset"], docs["vpn"]]
    assert entries[0]["score"] > entries[1]["score"] > 0
    first = entries[0]
    assert first["id"] == f"{docs['reset']}#0"
    assert "reset link expires" in first["content"]
    assert first["metadata"]["document_name"] == "reset.md"
    assert (first["metadata"]["position"], first["metadata"]["heading"]) == (0, "Passwords")


def test_a_heading_word_finds_its_section(docs):
    entries = search("docs", "canteen")

    assert [e["metadata"]["document_id"] for e in entries] == [docs["lunch"]]


def test_nothing_matching_answers_nothing(docs):
    assert search("docs", "quantum chromodynamics") == []
    assert search("docs", "???") == []


def test_top_k_caps_the_answer(docs):
    assert len(search("docs", "password network noon", top_k=1)) == 1


def test_filters_by_document_type_and_metadata(docs):
    assert [e["metadata"]["document_id"] for e in search("docs", "password", filters={"document_id": docs["vpn"]})] == [
        docs["vpn"]
    ]
    assert (
        search("docs", "password lunch", filters={"mime_type": "text/html"})[0]["metadata"]["document_id"]
        == docs["lunch"]
    )
    assert {e["metadata"]["team"] for e in search("docs", "password lunch", filters={"team": ["hr"]})} == {"hr"}
    assert search("docs", "password", filters={"heading": "Passwords"})[0]["metadata"]["document_id"] == docs["reset"]
    assert search("docs", "password", filters={"team": "finance"}) == []


@pytest.mark.parametrize("filters", [{"a__gt": 1}, {"team": {"x": 1}}, {"document_id": "nope"}, {"team": []}])
def test_a_filter_the_search_cannot_apply_is_an_error(docs, filters):
    with pytest.raises(FilterError):
        search("docs", "password", filters=filters)


def test_another_knowledge_base_is_not_searched(api_client, docs):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "other", "name": "Other"}, format="json")
    add(api_client, "other", "o.txt", "password password password")

    assert {e["metadata"]["document_id"] for e in search("docs", "password")} == {docs["reset"], docs["vpn"]}


def test_chinese_text_is_found_by_a_word_inside_a_sentence(api_client):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "zh", "name": "中文"}, format="json")
    refund = add(api_client, "zh", "refund.txt", "退款申请需要在收到商品后七天内提交。")
    add(api_client, "zh", "ship.txt", "我们的商品通过快递发货，一般三天送达。")

    entries = search("zh", "怎么申请退款")

    assert entries[0]["metadata"]["document_id"] == refund


def test_the_full_text_statement_renders_with_its_parameters():
    sql, params = full_text_ranked(
        connection.vendor, match="'a'", knowledge_base_pk=7, limit=5, restrict=("SELECT 1", (3,))
    )

    assert params == ["'a'", 7, 3, 5]
    assert sql.count("%s") == 3
    assert "ORDER BY score DESC" in sql
    assert "c.id IN (SELECT 1)" in sql


def _vector_kb(api_client: Any, workspace: Any, fake: FakeOpenAI) -> None:
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(provider=provider, model_id="embed", name="fake-embed", kind="embedding")
    body = {"kb_id": "vec", "name": "Vectors", "embedding_model_id": "embed"}
    api_client.post("/api/v1/knowledge-bases", body, format="json")


def _vector(fake: FakeOpenAI, text: str) -> np.ndarray:
    return np.asarray(embedding_of(text, fake.embedding_aliases), dtype=np.float32)


def test_hybrid_ranking_finds_by_meaning_what_full_text_misses(api_client, workspace, fake):
    # The fake model places "automobile" where "car" is: a synonym the words alone cannot match.
    fake.embedding_aliases = {"automobile": "car"}
    _vector_kb(api_client, workspace, fake)
    car = add(api_client, "vec", "car.txt", "Park the car in the garage")
    add(api_client, "vec", "bike.txt", "Lock the bike at the rack")

    text_only = search("vec", "automobile parking")
    hybrid = search("vec", "automobile parking", query_vector=_vector(fake, "automobile parking"))

    assert text_only == []
    assert hybrid[0]["metadata"]["document_id"] == car
    assert hybrid[0]["metadata"]["vector_score"] > hybrid[1]["metadata"]["vector_score"]
    assert "full_text_score" not in hybrid[0]["metadata"]


def test_hybrid_ranking_puts_first_what_both_rankings_like(api_client, workspace, fake):
    _vector_kb(api_client, workspace, fake)
    both = add(api_client, "vec", "a.txt", "invoice payment terms net thirty")
    add(api_client, "vec", "b.txt", "payment of the invoice")
    add(api_client, "vec", "c.txt", "terms of service")

    entries = search("vec", "invoice payment terms", query_vector=_vector(fake, "invoice payment terms"))

    assert entries[0]["metadata"]["document_id"] == both
    assert {"full_text_score", "vector_score"} <= set(entries[0]["metadata"])
    assert entries[0]["score"] == pytest.approx(2 / 61)


def test_filters_apply_to_vector_ranking_too(api_client, workspace, fake):
    _vector_kb(api_client, workspace, fake)
    add(api_client, "vec", "a.txt", "red apples", '{"lang": "en"}')
    pommes = add(api_client, "vec", "b.txt", "red pommes", '{"lang": "fr"}')

    entries = search("vec", "zzz", query_vector=_vector(fake, "red apples"), filters={"lang": "fr"})

    assert [e["metadata"]["document_id"] for e in entries] == [pommes]


def test_the_vector_cache_follows_new_and_deleted_documents(
    api_client, workspace, fake, django_capture_on_commit_callbacks
):
    _vector_kb(api_client, workspace, fake)
    first = add(api_client, "vec", "a.txt", "green tea")
    query = _vector(fake, "green tea")
    assert [e["metadata"]["document_id"] for e in search("vec", "", query_vector=query)] == [first]

    second = add(api_client, "vec", "b.txt", "green tea leaves")
    assert {e["metadata"]["document_id"] for e in search("vec", "", query_vector=query)} == {first, second}

    with django_capture_on_commit_callbacks(execute=True):
        api_client.delete(f"/api/v1/knowledge-bases/vec/documents/{first}")
    assert [e["metadata"]["document_id"] for e in search("vec", "", query_vector=query)] == [second]


def test_the_query_is_embedded_by_the_knowledge_bases_model(api_client, workspace, fake):
    _vector_kb(api_client, workspace, fake)
    # As knowledge_base_for_retrieval loads it: the provider with its workspace (its address policy).
    kb = KnowledgeBase.objects.select_related("embedding_model__provider__workspace").get(kb_id="vec")
    model = kb.embedding_model
    assert model is not None

    vector = asyncio.run(query_embed(model=model, text="hello world", timeout=5))

    assert np.allclose(vector, _vector(fake, "hello world"))
    assert fake.requests[-1] == {"model": "fake-embed", "input": ["hello world"], "encoding_format": "float"}


def _term_counts(kb_id: str, *words: str) -> dict[str, int]:
    return term_counts_get(knowledge_base_pk=KnowledgeBase.objects.get(kb_id=kb_id).pk, terms=list(words))


def test_the_match_keeps_the_rarest_words_within_the_candidate_budget(monkeypatch):
    monkeypatch.setattr(search_module, "CANDIDATE_BUDGET", 100)
    counts = {"common": 90, "rare": 2, "some": 20}

    assert matching_terms(["common", "rare", "some", "new"], counts, limit=10) == ["new", "rare", "some"]
    assert matching_terms(["common", "rare"], counts, limit=50) == ["rare", "common"]  # too few candidates else
    assert matching_terms(["common"], counts, limit=10) == ["common"]


@pytest.mark.postgres
def test_term_counts_follow_documents_ingested_replaced_and_deleted(api_client):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "tc", "name": "Counts"}, format="json")
    first = add(api_client, "tc", "a.txt", "apple banana apple")
    add(api_client, "tc", "b.txt", "apple cherry")
    assert _term_counts("tc", "apple", "banana", "cherry", "durian") == {"apple": 2, "banana": 1, "cherry": 1}

    KnowledgeDocument.objects.filter(document_id=first).update(status="queued")
    ingest(document_id=first)  # ingested again: its old chunks' words are taken out first
    assert _term_counts("tc", "apple", "banana") == {"apple": 2, "banana": 1}

    api_client.delete(f"/api/v1/knowledge-bases/tc/documents/{first}")
    assert _term_counts("tc", "apple", "banana", "cherry") == {"apple": 1, "cherry": 1}

    kb_pk = KnowledgeBase.objects.get(kb_id="tc").pk
    api_client.delete("/api/v1/knowledge-bases/tc")
    assert term_counts_get(knowledge_base_pk=kb_pk, terms=["apple", "cherry"]) == {}


@pytest.mark.postgres
def test_a_word_found_in_most_chunks_does_not_outrank_a_rare_one(api_client, monkeypatch):
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "big", "name": "Big"}, format="json")
    for i in range(6):
        add(api_client, "big", f"{i}.txt", f"widget widget widget widget assembly notes, part {i}")  # not duplicates
    rare = add(api_client, "big", "rare.txt", "widget calibration procedure")
    plain = add(api_client, "big", "plain.txt", "calibration log")
    monkeypatch.setattr(search_module, "CANDIDATE_BUDGET", 3)

    entries = search("big", "widget calibration", top_k=2)

    # "widget" is left out of the match (7 chunks hold it) but still ranks the candidates that have it.
    assert [e["metadata"]["document_id"] for e in entries] == [rare, plain]
    assert entries[0]["score"] > entries[1]["score"]
