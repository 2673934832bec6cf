"""A LangBot pipeline using `coze-api`, imported with `import_legacy_config`, answers through the real worker
and plugin runtime against the fake Coze, and its second message continues the Coze conversation."""

from __future__ import annotations

import pytest

from runners.models import Run
from runtimes.descriptors import runner_descriptors_sync
from tests.external_runners.legacy import import_legacy_pipeline
from tests.fakes.coze_server import BOT_ID, TOKEN, chat_events
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_imported_coze_pipeline_answers_through_the_worker_and_continues_the_conversation(
    worker, qa_report, coze, tmp_path
):
    # given LangBot's coze-api pipeline imported while the runner is installed
    runner_descriptors_sync(report=qa_report)
    block = {"api-key": TOKEN, "bot-id": BOT_ID, "api-base": coze.base_url, "auto-save-history": True, "timeout": 30}
    binding = import_legacy_pipeline(tmp_path, "coze-int", "coze-api", block)
    assert binding.config_validated is True, binding.source_detail
    coze.stream(chat_events("Hello", " from Coze", conversation_id="coze-conv-int"))
    coze.stream(chat_events("Again", conversation_id="coze-conv-int"))

    # when two messages of one conversation arrive
    first = wait_terminal(post_message(binding, "hi"), timeout=60)
    second = wait_terminal(post_message(binding, "and again"), timeout=60)

    # then both are answered by Coze, the second in the conversation Coze issued for the first
    assert first.status == Run.Status.COMPLETED, first.error
    assert (first.output, second.output) == ("Hello from Coze", "Again")
    assert first.usage["prompt_tokens"] == 1126
    assert first.usage["source"] == "coze"
    assert coze.params == [{}, {"conversation_id": "coze-conv-int"}]
    assert [r["additional_messages"][0]["content"] for r in coze.requests] == ["hi", "and again"]
