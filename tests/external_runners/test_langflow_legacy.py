"""`import_legacy_config` on a LangBot pipeline whose runner is `langflow-api`: the `ai.langflow-api` block
becomes a validated binding of plugin:langbot/langflow-agent/default, copied value for value (`tweaks` kept as
the JSON text LangBot stored), and that binding's config answers against the fake Langflow."""

from __future__ import annotations

import asyncio

import pytest

from bindings.services import binding_runner_config_plain
from tests.external_runners.legacy import answer_with, import_legacy_pipeline
from tests.external_runners.runs import completed_text
from tests.fakes.langflow_server import API_KEY, FLOW_ID

pytestmark = pytest.mark.django_db

LANGFLOW_ID = "plugin:langbot/langflow-agent/default"
# LangBot's `ai.langflow-api` block as its default pipeline config (and migration dbm006) writes it.
LANGBOT_BLOCK = {
    "base-url": "http://localhost:7860",
    "api-key": "your-api-key",
    "flow-id": "your-flow-id",
    "input-type": "chat",
    "output-type": "chat",
    "tweaks": "{}",
}


def import_pipeline(tmp_path, workspace, block):
    return import_legacy_pipeline(tmp_path, workspace.slug, "langflow-api", block, name="Langflow pipeline")


def test_a_langbot_langflow_block_imports_as_a_validated_binding_copied_value_for_value(
    tmp_path, workspace, installed_runners
):
    binding = import_pipeline(tmp_path, workspace, LANGBOT_BLOCK)

    assert binding.runner_id == LANGFLOW_ID
    assert binding.config_validated is True, binding.source_detail
    # every LangBot value is kept as it was; the runner's own timeout is added with its default
    assert binding_runner_config_plain(binding) == {**LANGBOT_BLOCK, "timeout": 120}
    assert binding.runner_secrets == {"api-key": "your-api-key"}


def test_the_imported_binding_answers_against_langflow(tmp_path, workspace, installed_runners, langflow):
    block = {**LANGBOT_BLOCK, "base-url": langflow.base_url, "api-key": API_KEY, "flow-id": FLOW_ID,
             "tweaks": '{"ChatInput-xyz": {"should_store_message": true}}'}  # fmt: skip
    binding = import_pipeline(tmp_path, workspace, block)
    langflow.reply("Imported and answering", tokens=("Imported ", "and answering"))

    results = asyncio.run(answer_with(LANGFLOW_ID, binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert completed_text(results) == "Imported and answering"
    assert langflow.requests[0]["tweaks"] == {"ChatInput-xyz": {"should_store_message": True}}
