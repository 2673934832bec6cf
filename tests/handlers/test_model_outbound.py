"""Model calls through the outbound address guard: a provider whose `base_url` is on loopback (the local
fake here) is refused at connect time unless the operator allowed private addresses for its workspace —
nothing reaches it, and the runner gets a clear error it should not retry — and reached once allowed."""

from __future__ import annotations

import pytest

from bindings.models import Workspace
from tests.fakes.openai_server import completion, rerank_answer

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _private_addresses_refused(settings):
    # The test settings allow private addresses host-wide (local fakes); these tests need the default.
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False


def _allow_private(run) -> None:
    Workspace.objects.filter(pk=run.workspace.pk).update(allow_private_addresses=True)


def test_a_provider_on_loopback_is_refused_at_connect_time_without_the_workspace_flag(model_run, fake):
    run = model_run()
    fake.reply(completion("never sent"))
    refused = run.refused("invoke_llm", model_id="m1", messages=HI)
    assert refused.code == "runtime_error"
    assert refused.retryable is False
    assert "loopback" in refused.error.message
    assert "allow_private_addresses" in refused.error.message
    assert fake.requests == []


def test_a_stream_from_a_provider_on_loopback_is_refused_too(model_run, fake):
    run = model_run()
    refused = run.refused("invoke_llm_stream", model_id="m1", messages=HI)
    assert "loopback" in refused.error.message
    assert fake.requests == []


def test_a_workspace_allowed_private_addresses_reaches_its_local_provider(model_run, fake):
    run = model_run()
    _allow_private(run)
    fake.reply(completion("hello from ollama"))
    result = run.call("invoke_llm", model_id="m1", messages=HI)
    assert result["message"]["content"] == "hello from ollama"


def test_a_rerank_provider_on_loopback_is_refused_unless_allowed(model_run, fake):
    run = model_run(kind="rerank")
    fake.reply(rerank_answer((1, 0.9, None), (0, 0.2, None)))
    refused = run.refused("invoke_rerank", model_id="m1", query="q", documents=["a", "b"])
    assert "loopback" in refused.error.message
    assert refused.retryable is False
    assert fake.requests == []
    _allow_private(run)
    result = run.call("invoke_rerank", model_id="m1", query="q", documents=["a", "b"])
    assert [item["index"] for item in result["results"]] == [1, 0]
