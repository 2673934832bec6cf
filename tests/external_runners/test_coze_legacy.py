"""`import_legacy_config` on a LangBot pipeline whose runner is `coze-api`: the `ai.coze-api` block becomes a
validated binding of plugin:langbot/coze-agent/default, copied value for value, and that binding's config
answers against the fake Coze."""

from __future__ import annotations

import asyncio

import pytest

from bindings.services import binding_runner_config_plain
from tests.external_runners.legacy import answer_with, import_legacy_pipeline
from tests.external_runners.runs import completed_text
from tests.fakes.coze_server import BOT_ID, TOKEN, chat_events

pytestmark = pytest.mark.django_db

COZE_ID = "plugin:langbot/coze-agent/default"
# LangBot's `ai.coze-api` block as its pipeline form writes it (templates/metadata/pipeline/ai.yaml).
LANGBOT_BLOCK = {
    "api-key": "pat_0123456789abcdef",
    "bot-id": "7350000000000000001",
    "api-base": "https://api.coze.com",
    "auto-save-history": True,
    "timeout": 120,
}


def test_a_langbot_coze_block_imports_as_a_validated_binding_copied_value_for_value(
    tmp_path, workspace, installed_runners
):
    binding = import_legacy_pipeline(tmp_path, workspace.slug, "coze-api", LANGBOT_BLOCK, name="Coze pipeline")

    assert binding.runner_id == COZE_ID
    assert binding.config_validated is True, binding.source_detail
    assert binding_runner_config_plain(binding) == LANGBOT_BLOCK
    assert binding.runner_secrets == {"api-key": LANGBOT_BLOCK["api-key"]}


def test_a_block_with_only_the_required_fields_gets_the_defaults_langbot_used(tmp_path, workspace, installed_runners):
    block = {"api-key": "pat_x1", "bot-id": "1"}
    binding = import_legacy_pipeline(tmp_path, workspace.slug, "coze-api", block, name="Coze pipeline")

    assert binding.config_validated is True
    assert binding_runner_config_plain(binding) == {
        "api-key": "pat_x1", "bot-id": "1", "api-base": "https://api.coze.cn", "auto-save-history": True,
        "timeout": 120,
    }  # fmt: skip


def test_the_imported_binding_answers_against_coze(tmp_path, workspace, installed_runners, coze):
    block = {**LANGBOT_BLOCK, "api-key": TOKEN, "api-base": coze.base_url}
    binding = import_legacy_pipeline(tmp_path, workspace.slug, "coze-api", block, name="Coze pipeline")
    coze.stream(chat_events("Imported ", "and answering"))

    results = asyncio.run(answer_with(COZE_ID, binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert completed_text(results) == "Imported and answering"
    assert coze.requests[0]["bot_id"] == BOT_ID
