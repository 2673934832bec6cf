"""A LangBot pipeline using `tbox-app-api`, imported with `import_legacy_config`, answers through the real
worker and plugin runtime against the fake Tbox, and its second message continues the Tbox conversation."""

from __future__ import annotations

import pytest

from runners.models import Run
from runtimes.descriptors import runner_descriptors_sync
from tests.external_runners.legacy import import_legacy_pipeline
from tests.fakes.tbox_server import APP_ID, TOKEN
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_imported_tbox_pipeline_answers_through_the_worker_and_continues_the_conversation(
    worker, qa_report, tbox, tmp_path
):
    # given LangBot's tbox-app-api pipeline (plus this fake's URL) imported while the runner is installed
    runner_descriptors_sync(report=qa_report)
    block = {"api-key": TOKEN, "app-id": APP_ID, "base-url": tbox.base_url}
    binding = import_legacy_pipeline(tmp_path, "tbox-int", "tbox-app-api", block)
    assert binding.config_validated is True, binding.source_detail
    tbox.answer("Hello", " from Tbox")
    tbox.answer("Again")

    # when two messages of one conversation arrive
    first = wait_terminal(post_message(binding, "hi"), timeout=60)
    second = wait_terminal(post_message(binding, "and again"), timeout=60)

    # then both are answered by the app, the second in the conversation Tbox issued for the first
    assert first.status == Run.Status.COMPLETED, first.error
    assert (first.output, second.output) == ("Hello from Tbox", "Again")
    assert "conversationId" not in tbox.requests[0]
    assert tbox.requests[1]["conversationId"] in tbox.issued_conversations
