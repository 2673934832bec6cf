"""`invoke_rerank` through the real handlers against a local Jina/Cohere-style `/rerank` endpoint: what the
provider receives, results ranked and cut to `top_k`, the document cap, and every provider failure as a
typed error without the key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from langbot_sdk.protocol import RerankResult
from tests.fakes.openai_server import rerank_answer
from tests.handlers.conftest import PROVIDER_KEY

DOCS = ["cats purr", "dogs bark", "cats and dogs"]


@pytest.fixture
def rerank_run(model_run):
    def make(*, kind: str = "rerank", **run: Any):
        return model_run(kind=kind, name="rerank-fake", headers={"X-Team": "blue"}, **run)

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
    assert fake.headers[0]["authorization"] == f"Bearer {PROVIDER_KEY}"
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
    fake.fail(status, f"provider says no (key {PROVIDER_KEY})", headers=headers)

    refused = run.refused("invoke_rerank", model_id="m1", query="q", documents=["a"])

    assert (refused.code, refused.retryable) == (code, retryable)
    assert "provider says no" in refused.error.message
    assert PROVIDER_KEY not in json.dumps(refused.error.model_dump())
    if status == 429:
        assert refused.error.details["retry_after"] == "7"


def test_an_unreachable_provider_is_a_retryable_runtime_error(rerank_run):
    run = rerank_run(base_url="http://127.0.0.1:9/v1")

    refused = run.refused("invoke_rerank", model_id="m1", query="q", documents=["a"])

    assert (refused.code, refused.retryable) == ("runtime_error", True)
