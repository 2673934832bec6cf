"""`import_legacy_config` on a LangBot pipeline whose runner is `coze-api`: the `ai.coze-api` block becomes a
validated binding of plugin:langbot/coze-agent/default, copied value for value, and that binding's config
answers against the fake Coze."""

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
from tests.fakes.coze_server import BOT_ID, TOKEN, FakeCoze, chat_events, fake_coze

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


@pytest.fixture
def coze() -> Iterator[FakeCoze]:
    with fake_coze() as server:
        yield server


@pytest.fixture
def installed_runners() -> None:
    plugins = load_plugins([PLUGINS_DIR])
    runner_descriptors_sync(report=ListAgentRunnersResponse(runners=plugins.manifests, plugins=plugins.reports))


def import_pipeline(tmp_path: Path, workspace: Any, block: dict[str, Any]) -> AgentBinding:
    path = tmp_path / "pipeline.json"
    pipeline = {"name": "Coze pipeline", "config": {"ai": {"runner": {"runner": "coze-api"}, "coze-api": block}}}
    path.write_text(json.dumps(pipeline), encoding="utf-8")
    call_command("import_legacy_config", str(path), "--workspace", workspace.slug)
    return AgentBinding.objects.get()


async def answer_with(config: dict[str, Any]) -> list[dict[str, Any]]:
    host, served = await start_host()
    try:
        return await host.run(COZE_ID, host.context(COZE_ID, "hi", config=config))
    finally:
        await host.connection.close()
        served.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await served


def test_a_langbot_coze_block_imports_as_a_validated_binding_copied_value_for_value(
    tmp_path, workspace, installed_runners
):
    binding = import_pipeline(tmp_path, workspace, LANGBOT_BLOCK)

    assert binding.runner_id == COZE_ID
    assert binding.config_validated is True, binding.source_detail
    assert binding_runner_config_plain(binding) == LANGBOT_BLOCK
    assert binding.runner_secrets == {"api-key": LANGBOT_BLOCK["api-key"]}


def test_a_block_with_only_the_required_fields_gets_the_defaults_langbot_used(tmp_path, workspace, installed_runners):
    binding = import_pipeline(tmp_path, workspace, {"api-key": "pat_x1", "bot-id": "1"})

    assert binding.config_validated is True
    assert binding_runner_config_plain(binding) == {
        "api-key": "pat_x1", "bot-id": "1", "api-base": "https://api.coze.cn", "auto-save-history": True,
        "timeout": 120,
    }  # fmt: skip


def test_the_imported_binding_answers_against_coze(tmp_path, workspace, installed_runners, coze):
    binding = import_pipeline(tmp_path, workspace, {**LANGBOT_BLOCK, "api-key": TOKEN, "api-base": coze.base_url})
    coze.stream(chat_events("Imported ", "and answering"))

    results = asyncio.run(answer_with(binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert next(r for r in results if r["type"] == "message.completed")["data"]["message"]["content"] == (
        "Imported and answering"
    )
    assert coze.requests[0]["bot_id"] == BOT_ID
