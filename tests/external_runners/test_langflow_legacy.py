"""`import_legacy_config` on a LangBot pipeline whose runner is `langflow-api`: the `ai.langflow-api` block
becomes a validated binding of plugin:langbot/langflow-agent/default, copied value for value (`tweaks` kept as
the JSON text LangBot stored), and that binding's config answers against the fake Langflow."""

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
from tests.fakes.langflow_server import API_KEY, FLOW_ID, FakeLangflow, fake_langflow

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


@pytest.fixture
def langflow() -> Iterator[FakeLangflow]:
    with fake_langflow() as server:
        yield server


@pytest.fixture
def installed_runners() -> None:
    plugins = load_plugins([PLUGINS_DIR])
    runner_descriptors_sync(report=ListAgentRunnersResponse(runners=plugins.manifests, plugins=plugins.reports))


def import_pipeline(tmp_path: Path, workspace: Any, block: dict[str, Any]) -> AgentBinding:
    path = tmp_path / "pipeline.json"
    config = {"ai": {"runner": {"runner": "langflow-api"}, "langflow-api": block}}
    path.write_text(json.dumps({"name": "Langflow pipeline", "config": config}), encoding="utf-8")
    call_command("import_legacy_config", str(path), "--workspace", workspace.slug)
    return AgentBinding.objects.get()


async def answer_with(config: dict[str, Any]) -> list[dict[str, Any]]:
    host, served = await start_host()
    try:
        return await host.run(LANGFLOW_ID, host.context(LANGFLOW_ID, "hi", config=config))
    finally:
        await host.connection.close()
        served.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await served


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

    results = asyncio.run(answer_with(binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert next(r for r in results if r["type"] == "message.completed")["data"]["message"]["content"] == (
        "Imported and answering"
    )
    assert langflow.requests[0]["tweaks"] == {"ChatInput-xyz": {"should_store_message": True}}
