"""`import_legacy_config` on a LangBot pipeline whose runner is `dashscope-app-api`: the `ai.dashscope-app-api`
block (with either spelling of the quote prefix LangBot has written) becomes a validated binding of
plugin:langbot/dashscope-agent/default, copied value for value, and that binding's config answers against
the fake DashScope."""

from __future__ import annotations

import asyncio

import pytest

from bindings.services import binding_runner_config_plain
from tests.external_runners.legacy import answer_with, import_legacy_pipeline
from tests.external_runners.runs import completed_text
from tests.fakes.dashscope_server import API_KEY, APP_ID, reference

pytestmark = pytest.mark.django_db

DASHSCOPE_ID = "plugin:langbot/dashscope-agent/default"
# LangBot's `ai.dashscope-app-api` block as its pipeline form (ai.yaml) and its default pipeline config write it.
FORM_BLOCK = {"app-type": "agent", "api-key": "sk-0123456789", "app-id": "app-1", "references_quote": "参考资料来自:"}
DEFAULT_CONFIG_BLOCK = {
    "app-type": "workflow", "api-key": "your-api-key", "app-id": "your-app-id", "references-quote": "参考资料来自:",
}  # fmt: skip


def import_pipeline(tmp_path, workspace, block):
    return import_legacy_pipeline(tmp_path, workspace.slug, "dashscope-app-api", block, name="DashScope pipeline")


@pytest.mark.parametrize("block", [FORM_BLOCK, DEFAULT_CONFIG_BLOCK], ids=["form", "default-config"])
def test_a_langbot_dashscope_block_imports_as_a_validated_binding_copied_value_for_value(
    tmp_path, workspace, installed_runners, block
):
    binding = import_pipeline(tmp_path, workspace, block)

    assert binding.runner_id == DASHSCOPE_ID
    assert binding.config_validated is True, binding.source_detail
    config = binding_runner_config_plain(binding)
    # every LangBot value is kept as it was; the runner's own fields are added with their defaults
    assert {key: config[key] for key in block} == block
    assert (config["base-url"], config["timeout"]) == ("https://dashscope.aliyuncs.com/api/v1", 120)


def test_the_imported_binding_answers_against_dashscope(tmp_path, workspace, installed_runners, dashscope):
    block = {**DEFAULT_CONFIG_BLOCK, "app-type": "agent", "api-key": API_KEY, "app-id": APP_ID,
             "references-quote": "Source:", "base-url": dashscope.base_url}  # fmt: skip
    binding = import_pipeline(tmp_path, workspace, block)
    dashscope.answer("Imported<ref>[1]</ref>", references=[reference("1", "guide.md")])

    results = asyncio.run(answer_with(DASHSCOPE_ID, binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert completed_text(results) == "Imported(Source: guide.md)"
