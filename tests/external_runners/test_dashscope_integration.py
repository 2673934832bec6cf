"""A LangBot pipeline using `dashscope-app-api`, imported with `import_legacy_config`, answers through the real
worker and plugin runtime against the fake DashScope, and its second message continues the session."""

from __future__ import annotations

import pytest

from runners.models import Run
from runtimes.descriptors import runner_descriptors_sync
from tests.external_runners.legacy import import_legacy_pipeline
from tests.fakes.dashscope_server import API_KEY, APP_ID
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_imported_dashscope_pipeline_answers_through_the_worker_and_continues_the_session(
    worker, qa_report, dashscope, tmp_path
):
    # given LangBot's dashscope-app-api pipeline imported while the runner is installed
    runner_descriptors_sync(report=qa_report)
    block = {"app-type": "agent", "api-key": API_KEY, "app-id": APP_ID, "references_quote": "参考资料来自:",
             "base-url": dashscope.base_url}  # fmt: skip
    binding = import_legacy_pipeline(tmp_path, "dashscope-int", "dashscope-app-api", block)
    assert binding.config_validated is True, binding.source_detail
    dashscope.answer("Hello", " from DashScope")
    dashscope.answer("Again")

    # when two messages of one conversation arrive
    first = wait_terminal(post_message(binding, "hi"), timeout=60)
    second = wait_terminal(post_message(binding, "and again"), timeout=60)

    # then both are answered by the app, the second in the session DashScope issued for the first
    assert first.status == Run.Status.COMPLETED, first.error
    assert (first.output, second.output) == ("Hello from DashScope", "Again")
    assert first.usage["total_tokens"] == 150
    assert "session_id" not in dashscope.requests[0]["input"]
    assert dashscope.requests[1]["input"]["session_id"] in dashscope.issued_sessions
