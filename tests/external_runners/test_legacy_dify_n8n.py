"""LangBot pipelines whose runner is `dify-service-api` or `n8n-service-api`, imported with
`import_legacy_config` (the import itself: test_legacy_import.py), answer against the fake platform through
the real worker and plugin runtime, the second message of a conversation continuing the first."""

from __future__ import annotations

import pytest

from runners.models import Run
from tests.external_runners.legacy import DIFY_BLOCK, N8N_BLOCK, import_legacy_pipeline
from tests.factories import WorkspaceFactory
from tests.fakes.dify_server import API_KEY, chat_events, fake_dify
from tests.fakes.n8n_server import fake_n8n
from tests.processes import post_message, wait_terminal


def import_pipeline(tmp_path, workspace, runner, block):
    return import_legacy_pipeline(tmp_path, workspace.slug, runner, block, name=f"{runner} pipeline")


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_imported_dify_pipeline_answers_through_the_worker(tmp_path, worker, installed_runners):
    with fake_dify() as dify:
        dify.stream(chat_events("Hello ", "from Dify", conversation_id="dify-conv-w"))
        dify.stream(chat_events("Again", conversation_id="dify-conv-w"))
        workspace = WorkspaceFactory.create()
        binding = import_pipeline(
            tmp_path, workspace, "dify-service-api", {**DIFY_BLOCK, "base-url": dify.base_url, "api-key": API_KEY}
        )

        first = wait_terminal(post_message(binding, "hi", conversation_id="conv-dify"), timeout=60)
        second = wait_terminal(post_message(binding, "again", conversation_id="conv-dify"), timeout=60)

    assert binding.config_validated is True
    assert (first.status, first.output) == (Run.Status.COMPLETED, "Hello from Dify"), first.error
    assert first.usage["total_tokens"] == 1168
    assert (second.status, second.output) == (Run.Status.COMPLETED, "Again"), second.error
    # the second turn continued the Dify conversation the first one was given, through the host's state
    assert [request["conversation_id"] for request in dify.requests] == ["", "dify-conv-w"]


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_imported_n8n_pipeline_answers_through_the_worker(tmp_path, worker, installed_runners):
    with fake_n8n() as n8n:
        n8n.stream("Hello ", "from n8n")
        n8n.json({"response": "plain again"})
        workspace = WorkspaceFactory.create()
        binding = import_pipeline(tmp_path, workspace, "n8n-service-api", {**N8N_BLOCK, "webhook-url": n8n.webhook_url})

        first = wait_terminal(post_message(binding, "hi", conversation_id="conv-n8n"), timeout=60)
        second = wait_terminal(post_message(binding, "again", conversation_id="conv-n8n"), timeout=60)

    assert binding.config_validated is True
    assert (first.status, first.output) == (Run.Status.COMPLETED, "Hello from n8n"), first.error
    assert (second.status, second.output) == (Run.Status.COMPLETED, "plain again"), second.error
    one, two = n8n.requests
    assert one["chatInput"] == "hi"
    assert two["conversation_id"] == one["conversation_id"]
    assert two["session_id"] == one["session_id"]
