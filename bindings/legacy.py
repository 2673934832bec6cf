"""Import of a LangBot pipeline config as an AgentBinding (HOST_SDK_INFRASTRUCTURE §4.2).

The pipeline's `ai.runner.runner` names a built-in runner of old LangBot; it maps to the official runner
plugin of OFFICIAL_RUNNER_PLUGINS §3, and the pipeline's `ai.<runner>` block becomes the binding's
`runner_config`, copied value for value — with one exception, named in `LEGACY_BLOCK_RESHAPES`: a field
whose LangBot shape no form item type can hold is split into fields that can, every value kept (LangBot's
local-agent `model: {primary, fallbacks, reasoning}` becomes `model`, `fallback-models` and
`model-reasoning`, so the host's resource builder sees the selected models). When the runner's plugin is
installed the block is checked against its config schema; when it is not, the block is stored unchecked
and the binding says so (`config_validated: false`, and `source_detail`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from bindings.services import (
    BindingValidationError,
    binding_create,
    binding_store_unvalidated,
    workspace_get_or_create,
)
from bindings.specs import BindingIn, BindingScopeIn
from langbot_host.core.storable import unstorable_text_path

# OFFICIAL_RUNNER_PLUGINS §3: old built-in runner → runner id of its official plugin.
LEGACY_RUNNER_IDS: dict[str, str] = {
    "local-agent": "plugin:langbot/local-agent/default",
    "dify-service-api": "plugin:langbot/dify-agent/default",
    "n8n-service-api": "plugin:langbot/n8n-agent/default",
    "coze-api": "plugin:langbot/coze-agent/default",
    "dashscope-app-api": "plugin:langbot/dashscope-agent/default",
    "langflow-api": "plugin:langbot/langflow-agent/default",
    "tbox-app-api": "plugin:langbot/tbox-agent/default",
}

LEGACY_EVENT_TYPE = "message.received"


def _local_agent_block(block: dict[str, Any]) -> dict[str, Any]:
    """LangBot's `model: {primary, fallbacks, reasoning}` (a plain id in older LangBot) as the local-agent
    plugin's `model` (a model selector), `fallback-models` (a multiple model selector) and `model-reasoning`."""
    model = block.get("model")
    if not isinstance(model, dict):
        return block
    reshaped = {key: value for key, value in block.items() if key != "model"}
    reshaped["model"] = model.get("primary", "")
    if "fallbacks" in model:
        reshaped["fallback-models"] = model["fallbacks"]
    if "reasoning" in model:
        reshaped["model-reasoning"] = model["reasoning"]
    extra = {key: value for key, value in model.items() if key not in ("primary", "fallbacks", "reasoning")}
    if extra:
        # Keys LangBot may add later stay visible (and fail validation by name) rather than vanish.
        reshaped["model-extra"] = extra
    return reshaped


# Old runner → how its block's LangBot shape becomes the official plugin's config (see the module doc).
LEGACY_BLOCK_RESHAPES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"local-agent": _local_agent_block}


class LegacyImportError(Exception):
    """The file cannot be imported; nothing was written."""


@dataclass(frozen=True)
class LegacyImportResult:
    binding: AgentBinding
    legacy_runner: str
    validated: bool
    dry_run: bool


@dataclass(frozen=True)
class LegacyPipeline:
    name: str
    legacy_runner: str
    runner_id: str
    runner_config: dict[str, Any]


def legacy_config_load(path: Path) -> Any:
    """JSON, or YAML for `.yaml`/`.yml` files."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LegacyImportError(f"cannot read {path}: {exc}") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            return yaml.safe_load(text)
        return json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise LegacyImportError(
            f"{path} is not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'JSON'}: {exc}"
        ) from None


def legacy_pipeline_parse(data: Any) -> LegacyPipeline:
    """Read the runner and its block out of a pipeline config (bare, or wrapped as `{name, config}`)."""
    if not isinstance(data, dict):
        raise LegacyImportError("the file must hold a JSON/YAML object")
    name = str(data.get("name") or "")
    config = data["config"] if isinstance(data.get("config"), dict) and "ai" in data["config"] else data
    ai = config.get("ai")
    if not isinstance(ai, dict):
        raise LegacyImportError("no `ai` section: this is not a LangBot pipeline config")
    runner_section = ai.get("runner")
    legacy_runner = runner_section.get("runner") if isinstance(runner_section, dict) else None
    if not isinstance(legacy_runner, str) or not legacy_runner:
        raise LegacyImportError("no `ai.runner.runner`: the pipeline names no runner")
    if legacy_runner not in LEGACY_RUNNER_IDS:
        raise LegacyImportError(
            f"unknown runner {legacy_runner!r}; known runners: {', '.join(sorted(LEGACY_RUNNER_IDS))}"
        )
    block = ai.get(legacy_runner, {})
    if not isinstance(block, dict):
        raise LegacyImportError(f"`ai.{legacy_runner}` must be an object")
    unstorable = unstorable_text_path(block)
    if unstorable is not None:
        # The block is copied as it is or not at all.
        where = f"ai.{legacy_runner}" + (f".{unstorable}" if unstorable else "")
        raise LegacyImportError(f"`{where}` holds a NUL character or an unpaired surrogate, which cannot be stored")
    reshape = LEGACY_BLOCK_RESHAPES.get(legacy_runner)
    return LegacyPipeline(
        name=name,
        legacy_runner=legacy_runner,
        runner_id=LEGACY_RUNNER_IDS[legacy_runner],
        runner_config=reshape(block) if reshape is not None else block,
    )


class _DryRunRollbackError(Exception):
    pass


def legacy_config_import(
    *,
    data: Any,
    workspace_slug: str,
    bot_id: str | None = None,
    dry_run: bool = False,
    validate: bool = True,
    origin: str = "",
) -> LegacyImportResult:
    """Create the binding a pipeline config describes; with `dry_run` everything is checked, nothing kept."""
    pipeline = legacy_pipeline_parse(data)
    result: LegacyImportResult | None = None
    try:
        with transaction.atomic():
            workspace = workspace_get_or_create(slug=workspace_slug)
            result = _import(
                pipeline, workspace=workspace, bot_id=bot_id, validate=validate, origin=origin, dry_run=dry_run
            )
            if dry_run:
                raise _DryRunRollbackError
    except _DryRunRollbackError:
        pass
    assert result is not None
    return result


def _import(
    pipeline: LegacyPipeline, *, workspace: Workspace, bot_id: str | None, validate: bool, origin: str, dry_run: bool
) -> LegacyImportResult:
    if bot_id is not None and not Bot.objects.filter(workspace=workspace, bot_id=bot_id).exists():
        raise LegacyImportError(f"there is no bot {bot_id!r} in workspace {workspace.slug!r}")
    spec = BindingIn(
        name=pipeline.name or f"Imported {pipeline.legacy_runner}",
        scope=BindingScopeIn(scope_type="bot", scope_id=bot_id) if bot_id else BindingScopeIn(scope_type="workspace"),
        event_types=[LEGACY_EVENT_TYPE],
        runner_id=pipeline.runner_id,
        runner_config=pipeline.runner_config,
    )
    descriptor_known = (
        RunnerDescriptor.objects.filter(runner_id=pipeline.runner_id)
        .exclude(status=RunnerDescriptor.Status.MISSING)
        .exists()
    )
    detail = {"origin": origin, "legacy_runner": pipeline.legacy_runner}
    try:
        if validate and descriptor_known:
            binding = binding_create(
                workspace=workspace,
                spec=spec,
                source=AgentBinding.Source.LEGACY_IMPORT,
                source_detail=json.dumps({**detail, "validated": True}, ensure_ascii=False),
            )
        else:
            reason = "validation skipped on request" if descriptor_known else "runner not installed at import time"
            binding = binding_store_unvalidated(
                workspace=workspace,
                spec=spec,
                source=AgentBinding.Source.LEGACY_IMPORT,
                source_detail=json.dumps({**detail, "validated": False, "reason": reason}, ensure_ascii=False),
            )
    except BindingValidationError as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.fields.items())
        raise LegacyImportError(f"the config does not fit runner {pipeline.runner_id}: {problems}") from None
    return LegacyImportResult(
        binding=binding, legacy_runner=pipeline.legacy_runner, validated=binding.config_validated, dry_run=dry_run
    )
