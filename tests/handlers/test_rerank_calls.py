"""`invoke_rerank` through the real handlers against a local Jina/Cohere-style `/rerank` endpoint: what the
provider receives, results ranked and cut to `top_k`, the document cap, and every provider failure as a
typed error without the key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from langbot_sdk.protocol import RerankResult
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, fake_openai, rerank_answer

KEY = "sk-secret-key-123456"
DOCS = ["cats purr", "dogs bark", "cats and dogs"]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@pytest.fixture
def rerank_run(host_run, fake):
    def make(*, kind: str = "rerank", **kwargs: Any):
        workspace = WorkspaceFactory.create()
        provider = ModelProviderFactory.create(
            workspace=workspace, base_url=fake.base_url, api_key=KEY, headers={"X-Team": "blue"}, max_retries=0
        )
        ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", name="rerank-fake", kind=kind)
        return host_run(
            workspace=workspace, config={"model": "m1"}, resource_policy={"allowed_model_ids": ["m1"]}, **kwargs
        )

    return make


def test_documents_come_back_ranked_by_the_providers_scores(rerank_run, fake):
    run = rerank_run()
    fake.reply(rerank_answer((1, 0.2, "dogs bark"), (2, 0.7, {"text": "cats and dogs"}), (0, 0.9, None)))

    result = RerankResult.model_validate(run.call("invoke_rerank", model_id="m1", query="cats", documents=DOCS))

    assert [(item.index, item.score, item.document) for item in result.results] == [
        (0, 0.9, None),
        (2, 0.7, "cats and dogs"),
        (1, 0.2, "dogs bark"),
    ]
    assert fake.paths == ["/v1/rerank"]
    assert fake.requests[0] == {"model": "rerank-fake", "query": "cats", "documents": DOCS, "top_n": 3}
    assert fake.headers[0]["authorization"] == f"Bearer {KEY}"
    assert fake.headers[0]["x-team"] == "blue"


def test_top_k_is_asked_of_the_provider_and_caps_the_results(rerank_run, fake):
    run = rerank_run()
    fake.reply(rerank_answer((2, 0.7, None), (0, 0.9, None), (1, 0.1, None)))

    result = RerankResult.model_validate(
        run.call("invoke_rerank", model_id="m1", query="cats", documents=DOCS, top_k=2)
    )

    assert [item.index for item in result.results] == [0, 2]
    assert fake.requests[0]["top_n"] == 2


def test_usage_in_the_answer_is_counted_and_an_answer_without_it_counts_nothing(rerank_run, fake):
    run = rerank_run()
    fake.reply(rerank_answer((0, 0.5, None), usage={"total_tokens": 11}))
    fake.reply(rerank_answer((0, 0.5, None)))

    run.call("invoke_rerank", model_id="m1", query="q", documents=["a"])
    run.call("invoke_rerank", model_id="m1", query="q", documents=["a"])

    assert run.built.session.usage.models["m1"]["total_tokens"] == 11


def test_more_than_64_documents_are_refused_naming_the_cap(rerank_run, fake):
    run = rerank_run()

    refused = run.refused("invoke_rerank", model_id="m1", query="q", documents=["d"] * 65)

    assert refused.code == "invalid_argument"
    assert "64" in refused.error.message
    assert fake.requests == []


def test_a_model_that_is_not_a_rerank_model_is_an_invalid_argument(rerank_run, fake):
    run = rerank_run(kind="embedding")

    assert run.refused("invoke_rerank", model_id="m1", query="q", documents=["a"]).code == "invalid_argument"
    assert fake.requests == []


@pytest.mark.parametrize(
    ("status", "headers", "code", "retryable"),
    [
        (429, {"retry-after": "7"}, "rate_limited", True),
        (500, {}, "runtime_error", True),
        (401, {}, "unauthorized", False),
        (400, {}, "invalid_argument", False),
    ],
)
def test_provider_failures_are_typed_and_never_show_the_key(rerank_run, fake, status, headers, code, retryable):
    run = rerank_run()
    fake.fail(status, f"provider says no (key {KEY})", headers=headers)

    refused = run.refused("invoke_rerank", model_id="m1", query="q", documents=["a"])

    assert (refused.code, refused.retryable) == (code, retryable)
    assert "provider says no" in refused.error.message
    assert KEY not in json.dumps(refused.error.model_dump())
    if status == 429:
        assert refused.error.details["retry_after"] == "7"


def test_an_unreachable_provider_is_a_retryable_runtime_error(host_run):
    workspace = WorkspaceFactory.create()
    provider = ModelProviderFactory.create(workspace=workspace, base_url="http://127.0.0.1:9/v1", max_retries=0)
    ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", kind="rerank")
    run = host_run(workspace=workspace, config={"model": "m1"}, resource_policy={"allowed_model_ids": ["m1"]})

    refused = run.refused("invoke_rerank", model_id="m1", query="q", documents=["a"])

    assert (refused.code, refused.retryable) == ("runtime_error", True)
