"""`import_legacy_config` on a LangBot pipeline whose runner is `tbox-app-api`: the `ai.tbox-app-api` block
becomes a validated binding of plugin:langbot/tbox-agent/default, copied value for value, and that binding's
config answers against the fake Tbox."""

from __future__ import annotations

import asyncio

import pytest

from bindings.services import binding_runner_config_plain
from tests.external_runners.legacy import answer_with, import_legacy_pipeline
from tests.external_runners.runs import completed_text
from tests.fakes.tbox_server import APP_ID, TOKEN

pytestmark = pytest.mark.django_db

TBOX_ID = "plugin:langbot/tbox-agent/default"
# LangBot's `ai.tbox-app-api` block as its pipeline form writes it (templates/metadata/pipeline/ai.yaml).
LANGBOT_BLOCK = {"api-key": "tbox-0123456789", "app-id": "202509APabcdef"}


def import_pipeline(tmp_path, workspace, block):
    return import_legacy_pipeline(tmp_path, workspace.slug, "tbox-app-api", block, name="Tbox pipeline")


def test_a_langbot_tbox_block_imports_as_a_validated_binding_copied_value_for_value(
    tmp_path, workspace, installed_runners
):
    binding = import_pipeline(tmp_path, workspace, LANGBOT_BLOCK)

    assert binding.runner_id == TBOX_ID
    assert binding.config_validated is True, binding.source_detail
    # every LangBot value is kept as it was; the runner's own fields are added with their defaults
    assert binding_runner_config_plain(binding) == {**LANGBOT_BLOCK, "base-url": "https://api.tbox.cn", "timeout": 120}
    assert binding.runner_secrets == {"api-key": LANGBOT_BLOCK["api-key"]}


def test_the_imported_binding_answers_against_tbox(tmp_path, workspace, installed_runners, tbox):
    binding = import_pipeline(tmp_path, workspace, {"api-key": TOKEN, "app-id": APP_ID, "base-url": tbox.base_url})
    tbox.answer("Imported ", "and answering")

    results = asyncio.run(answer_with(TBOX_ID, binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert completed_text(results) == "Imported and answering"
