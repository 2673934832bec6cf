"""`import_legacy_config` on a LangBot pipeline whose runner is `tbox-app-api`: the `ai.tbox-app-api` block
becomes a validated binding of plugin:langbot/tbox-agent/default, copied value for value, and that binding's
config answers against the fake Tbox."""

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
from tests.fakes.tbox_server import APP_ID, TOKEN, FakeTbox, fake_tbox

pytestmark = pytest.mark.django_db

TBOX_ID = "plugin:langbot/tbox-agent/default"
# LangBot's `ai.tbox-app-api` block as its pipeline form writes it (templates/metadata/pipeline/ai.yaml).
LANGBOT_BLOCK = {"api-key": "tbox-0123456789", "app-id": "202509APabcdef"}


@pytest.fixture
def tbox() -> Iterator[FakeTbox]:
    with fake_tbox() as server:
        yield server


@pytest.fixture
def installed_runners() -> None:
    plugins = load_plugins([PLUGINS_DIR])
    runner_descriptors_sync(report=ListAgentRunnersResponse(runners=plugins.manifests, plugins=plugins.reports))


def import_pipeline(tmp_path: Path, workspace: Any, block: dict[str, Any]) -> AgentBinding:
    path = tmp_path / "pipeline.json"
    config = {"ai": {"runner": {"runner": "tbox-app-api"}, "tbox-app-api": block}}
    path.write_text(json.dumps({"name": "Tbox pipeline", "config": config}), encoding="utf-8")
    call_command("import_legacy_config", str(path), "--workspace", workspace.slug)
    return AgentBinding.objects.get()


async def answer_with(config: dict[str, Any]) -> list[dict[str, Any]]:
    host, served = await start_host()
    try:
        return await host.run(TBOX_ID, host.context(TBOX_ID, "hi", config=config))
    finally:
        await host.connection.close()
        served.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await served


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

    results = asyncio.run(answer_with(binding_runner_config_plain(binding)))

    assert results[-1]["type"] == "run.completed", results
    assert next(r for r in results if r["type"] == "message.completed")["data"]["message"]["content"] == (
        "Imported and answering"
    )
