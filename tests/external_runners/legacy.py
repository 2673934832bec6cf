"""LangBot pipelines imported with `import_legacy_config`, and a one-off run of the binding that results
against a fake platform: what the legacy-import tests of every external runner do; and LangBot's blocks of
those runners as LangBot wrote them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from django.core.management import call_command

from bindings.models import AgentBinding
from bindings.services import binding_runner_config_plain
from tests.external_runners.host import start_host

# LangBot's blocks as its pipeline form (templates/metadata/pipeline/ai.yaml), its default pipeline config
# (default-pipeline-config.json, migration dbm006) and older versions (`thinking-convert`) write them.
DIFY_BLOCK = {
    "base-url": "https://api.dify.ai/v1",
    "base-prompt": "When the file content is readable, please read the content of this file.",
    "app-type": "chat",
    "api-key": "app-0123456789abcdef",
    "timeout": 30,
    "thinking-convert": "plain",
}
N8N_BLOCK = {
    "webhook-url": "http://your-n8n-webhook-url",
    "auth-type": "none",
    "basic-username": "",
    "basic-password": "",
    "jwt-secret": "",
    "jwt-algorithm": "HS256",
    "header-name": "",
    "header-value": "",
    "timeout": 120,
    "output-key": "response",
}
COZE_BLOCK = {
    "api-key": "pat_0123456789abcdef",
    "bot-id": "7350000000000000001",
    "api-base": "https://api.coze.com",
    "auto-save-history": True,
    "timeout": 120,
}
DASHSCOPE_FORM_BLOCK = {
    "app-type": "agent", "api-key": "sk-0123456789", "app-id": "app-1", "references_quote": "参考资料来自:",
}  # fmt: skip
DASHSCOPE_DEFAULT_CONFIG_BLOCK = {
    "app-type": "workflow", "api-key": "your-api-key", "app-id": "your-app-id", "references-quote": "参考资料来自:",
}  # fmt: skip
LANGFLOW_BLOCK = {
    "base-url": "http://localhost:7860",
    "api-key": "your-api-key",
    "flow-id": "your-flow-id",
    "input-type": "chat",
    "output-type": "chat",
    "tweaks": "{}",
}
TBOX_BLOCK = {"api-key": "tbox-0123456789", "app-id": "202509APabcdef"}


def import_legacy_pipeline(
    tmp_path: Path, workspace_slug: str, runner: str, block: dict[str, Any], *, name: str | None = None
) -> AgentBinding:
    """The binding imported from a pipeline whose runner is `runner` with its `ai.<runner>` block: a pipeline
    export (`{"name", "config"}`) when `name` is given, else the bare pipeline config."""
    config = {"ai": {"runner": {"runner": runner}, runner: block}}
    path = tmp_path / f"{runner}.json"
    path.write_text(json.dumps({"name": name, "config": config} if name else config), encoding="utf-8")
    call_command("import_legacy_config", str(path), "--workspace", workspace_slug)
    bindings = AgentBinding.objects.filter(workspace__slug=workspace_slug)
    return bindings.get(name=name) if name else bindings.get()


async def answer_with(runner_id: str, config: dict[str, Any], text: str = "hi") -> list[dict[str, Any]]:
    """The results of one run of `runner_id` with `config`, in a runtime started (and stopped) for it."""
    host, served = await start_host()
    try:
        return await host.run(runner_id, host.context(runner_id, text, config=config))
    finally:
        await host.connection.close()
        served.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await served


def imported_answer(tmp_path: Path, workspace_slug: str, runner: str, block: dict[str, Any]) -> list[dict[str, Any]]:
    """The results of one run of the binding imported from `runner`'s `block`: its runner with its config."""
    binding = import_legacy_pipeline(tmp_path, workspace_slug, runner, block, name=f"{runner} pipeline")
    return asyncio.run(answer_with(binding.runner_id, binding_runner_config_plain(binding)))
