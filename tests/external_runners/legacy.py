"""LangBot pipelines imported with `import_legacy_config`, and a one-off run of the binding that results
against a fake platform: what the legacy-import tests of every external runner do."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from django.core.management import call_command

from bindings.models import AgentBinding
from tests.external_runners.host import start_host


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
