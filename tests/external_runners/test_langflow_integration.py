"""A LangBot pipeline using `langflow-api`, imported with `import_legacy_config`, answers through the real
worker and plugin runtime against the fake Langflow, and its second message stays in the same session."""

from __future__ import annotations

import pytest

from runners.models import Run
from runtimes.descriptors import runner_descriptors_sync
from tests.external_runners.legacy import import_legacy_pipeline
from tests.fakes.langflow_server import API_KEY, FLOW_ID
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_imported_langflow_pipeline_answers_through_the_worker_in_one_session(worker, qa_report, langflow, tmp_path):
    # given LangBot's langflow-api pipeline imported while the runner is installed
    runner_descriptors_sync(report=qa_report)
    block = {"base-url": langflow.base_url, "api-key": API_KEY, "flow-id": FLOW_ID, "input-type": "chat",
             "output-type": "chat", "tweaks": "{}"}  # fmt: skip
    binding = import_legacy_pipeline(tmp_path, "langflow-int", "langflow-api", block)
    assert binding.config_validated is True, binding.source_detail
    langflow.reply("Hello from Langflow", tokens=("Hello", " from Langflow"))
    langflow.reply("Again")

    # when two messages of one conversation arrive
    first = wait_terminal(post_message(binding, "hi"), timeout=60)
    second = wait_terminal(post_message(binding, "and again"), timeout=60)

    # then both are answered by the flow, in one Langflow session
    assert first.status == Run.Status.COMPLETED, first.error
    assert (first.output, second.output) == ("Hello from Langflow", "Again")
    assert [r["input_value"] for r in langflow.requests] == ["hi", "and again"]
    sessions = {r["session_id"] for r in langflow.requests}
    assert len(sessions) == 1
    assert sessions.pop().startswith("langbot-")
