"""`import_legacy_config` on a LangBot pipeline whose runner is `dashscope-app-api`: the `ai.dashscope-app-api`
block (with either spelling of the quote prefix LangBot has written) becomes a validated binding of
plugin:langbot/dashscope-agent/default, copied value for value, and that binding's config answers against
the fake DashScope."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from bindings.models import AgentBinding
from bindings.services import binding_runner_config_plain
from langbot_sdk.protocol import ListAgentRunnersResponse
from langbot_sdk.runtime.loader import load_plugins
from runners.runtime.catalog import runner_descriptors_sync
from tests.external_runners.host import PLUGINS_DIR, start_host
from tests.fakes.dashscope_server import API_KEY, APP_ID, FakeDashScope, fake_dashscope, reference

pytestmark = pytest.mark.django_db

DASHSCOPE_ID = "plugin:langbot/dashscope-agent/default"
# LangBot's `ai.dashscope-app-api` block as its pipeline form (ai.yaml) and its default pipeline config write it.
FORM_BLOCK = {"app-type": "agent", "api-key": "sk-0123456789", "app-id": "app-1", "references_quote": "参考资料来自:"}
DEFAULT_CONFIG_BLOCK = {
    "app-type": "workflow", "api-key": "your-api-key", "app-id": "your-app-id", "references-quote": "参考资料来自:",
}  # fmt: skip


@pytest.fixture
def dashscope() -> Iterator[FakeDashScope]:
    with fake_dashscope() as server:
        yield server


@pytest.fixture
def installed_runners() -> None:
    plugins = load_plugins([PLUGINS_DIR])
    runner_descriptors_sync(report=ListAgentRunnersResponse(runners=plugins.manifests, plugins=plugins.reports))


def import_pipeline(tmp_path: Path, workspace: Any, block: dict[str, Any]) -> AgentBinding:
    path = tmp_path / "pipeline.json"
    config = {"ai": {"runner": {"runner": "dashscope-app-api"}, "dashscope-app-api": block}}
    path.write_text(json.dumps({"name": "DashScope pipeline", "config": config}), encoding="utf-8")
    call_command("import_legacy_config", str(path), "--workspace", workspace.slug)
    return AgentBinding.objects.get()


async def answer_with(config: dict[str, Any]) -> list[dict[str, Any]]:
    host, served = await start_host()
    try:
        return await host.run(DASHSCOPE_ID, host.context(DASHSCOPE_ID, "hi", config=config))
    finally:
        await host.connection.close()
        served.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await served


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

    results = asyncio.run(answer_with(binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert next(r for r in results if r["type"] == "message.completed")["data"]["message"]["content"] == (
        "Imported(Source: guide.md)"
    )
