"""A LangBot pipeline using `dashscope-app-api`, imported with `import_legacy_config`, answers through the real
worker and plugin runtime against the fake DashScope, and its second message continues the session."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.core.management import call_command

from bindings.models import AgentBinding
from runners.models import Run
from runners.runtime.catalog import runner_descriptors_sync
from tests.fakes.dashscope_server import API_KEY, APP_ID, FakeDashScope, fake_dashscope
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def dashscope() -> Iterator[FakeDashScope]:
    with fake_dashscope() as server:
        yield server


def test_an_imported_dashscope_pipeline_answers_through_the_worker_and_continues_the_session(
    worker, qa_report, dashscope, tmp_path
):
    # given LangBot's dashscope-app-api pipeline imported while the runner is installed
    runner_descriptors_sync(report=qa_report)
    block = {"app-type": "agent", "api-key": API_KEY, "app-id": APP_ID, "references_quote": "参考资料来自:",
             "base-url": dashscope.base_url}  # fmt: skip
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps({"ai": {"runner": {"runner": "dashscope-app-api"}, "dashscope-app-api": block}}))
    call_command("import_legacy_config", str(path), "--workspace", "dashscope-int")
    binding = AgentBinding.objects.get(workspace__slug="dashscope-int")
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
