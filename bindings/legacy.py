"""Import of a LangBot pipeline config as an AgentBinding that answers.

The pipeline's `ai.runner.runner` names a built-in runner of old LangBot; it maps to the official runner
plugin of OFFICIAL_RUNNER_PLUGINS §3, and the pipeline's `ai.<runner>` block becomes the binding's
`runner_config`, copied value for value — with one exception, named in `LEGACY_BLOCK_RESHAPES`: a field
whose LangBot shape no form item type can hold is split into fields that can, every value kept (LangBot's
local-agent `model: {primary, fallbacks, reasoning}` becomes `model`, `fallback-models` and
`model-reasoning`, so the host's resource builder sees the selected models). When the runner's plugin is
installed the block is checked against its config schema. A runner that is not installed is refused (nothing
is written) unless the caller allows it: then the block is stored unchecked and the binding says so
(`config_validated: false`, and `source_detail`).

The rest of the pipeline maps as far as the host has an equivalent, and what has none is named in the
import's report (`LegacyImportResult.unmapped`, also kept in `source_detail`), never dropped silently:

* `ai.local-agent`'s selections become the binding's `resource_policy` — the primary, fallback and rerank
  models (`allowed_model_ids`), the knowledge bases (`allowed_kb_ids`), and the tools: every tool when
  `enable-all-tools` is on (LangBot's default), else the named ones (`allowed_tool_names`). A selected model
  or knowledge base the workspace does not have is reported: the binding would fail its first message.
* `output`: `misc.remove-think` goes to the runners that have it (dify-agent); the delivery policy keeps
  the host's defaults (reply, streaming) since LangBot's output options — long-text conversion, forced
  delay, failure hints, @-sender, quoting, function-call tracking — have no delivery-policy equivalent.
* `trigger`: the binding handles `message.received` in its scope. LangBot's group rule "@-mention the bot"
  is what the host's platform adapters already apply (a group message reaches the host only when it
  addresses the bot: mention, reply or command); prefix, regexp and random group rules, ignore rules,
  access-control lists and message aggregation have no equivalent and are reported when set.
* `safety` (content filter, rate limit) and `ai.runner.expire-time` are reported when set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from bindings.policies import WILDCARD, DeliveryPolicy, ResourcePolicy
from bindings.resource_catalog import ResourceKind, resource_catalog_source
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
    unmapped: list[str] = field(default_factory=list)
    """What of the pipeline the binding does not do, one `section.path: why` line each."""


@dataclass(frozen=True)
class LegacyPipeline:
    name: str
    legacy_runner: str
    runner_id: str
    runner_config: dict[str, Any]
    resource_policy: ResourcePolicy = field(default_factory=ResourcePolicy)
    delivery_policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    unmapped: list[str] = field(default_factory=list)


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
    runner_config = reshape(block) if reshape is not None else dict(block)
    output = _section(config, "output")
    remove_think = _section(output, "misc").get("remove-think")
    if legacy_runner in RUNNERS_WITH_REMOVE_THINK and isinstance(remove_think, bool):
        runner_config.setdefault("remove-think", remove_think)
    return LegacyPipeline(
        name=name,
        legacy_runner=legacy_runner,
        runner_id=LEGACY_RUNNER_IDS[legacy_runner],
        runner_config=runner_config,
        resource_policy=_resource_policy(legacy_runner, block),
        unmapped=[
            *_unmapped_runner_settings(_section(ai, "runner")),
            *_unmapped_trigger(_section(config, "trigger")),
            *_unmapped_safety(_section(config, "safety")),
            *_unmapped_output(output, legacy_runner),
        ],
    )


# Old runners whose official plugin takes LangBot's `output.misc.remove-think` in its own config.
RUNNERS_WITH_REMOVE_THINK = frozenset({"dify-service-api"})
NO_RERANK_MODEL = ("", "__none__")  # LangBot's ways of saying "no rerank model"


def _section(config: Any, name: str) -> dict[str, Any]:
    value = config.get(name) if isinstance(config, dict) else None
    return value if isinstance(value, dict) else {}


def _ids(value: Any) -> list[str]:
    """The non-empty strings of a LangBot selection (one id or a list of them), in order, each once."""
    items = value if isinstance(value, list) else [value]
    return list(dict.fromkeys(item.strip() for item in items if isinstance(item, str) and item.strip()))


def _resource_policy(legacy_runner: str, block: dict[str, Any]) -> ResourcePolicy:
    """What the local-agent block selects, allowed (every other runner calls its own platform)."""
    if legacy_runner != "local-agent":
        return ResourcePolicy()
    model = block.get("model")
    primary = model.get("primary") if isinstance(model, dict) else model
    fallbacks = model.get("fallbacks") if isinstance(model, dict) else []
    rerank = block.get("rerank-model")
    models = _ids([*_ids(primary), *_ids(fallbacks), *([] if rerank in NO_RERANK_MODEL else _ids(rerank))])
    kbs = _ids([*_ids(block.get("knowledge-bases")), *_ids(block.get("knowledge-base"))])
    # LangBot offered every tool unless `enable-all-tools` was turned off; then only the named ones.
    tools = [WILDCARD] if block.get("enable-all-tools", True) is not False else _ids(block.get("tools"))
    return ResourcePolicy(allowed_model_ids=models, allowed_kb_ids=kbs, allowed_tool_names=tools)


def _is_set(value: Any) -> bool:
    """Whether a LangBot option is switched on: a true flag, a non-zero number, a non-empty list or text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return bool(value)


def _unmapped_runner_settings(runner_section: dict[str, Any]) -> list[str]:
    if _is_set(runner_section.get("expire-time")):
        return [
            "ai.runner.expire-time: conversations do not expire after idle time on the host "
            "(a new conversation id starts a new one)"
        ]
    return []


def _unmapped_trigger(trigger: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    group = _section(trigger, "group-respond-rules")
    if group and group.get("at") is False:
        notes.append(
            "trigger.group-respond-rules.at: false — the host's platform adapters answer a group message that "
            "@-mentions (or replies to, or commands) the bot; disable the binding for group chats if that is unwanted"
        )
    for rule in ("prefix", "regexp", "random"):
        if _is_set(group.get(rule)):
            notes.append(
                f"trigger.group-respond-rules.{rule}: group messages that do not address the bot (mention, reply, "
                "command) do not reach the host, so this rule cannot trigger a reply"
            )
    access = _section(trigger, "access-control")
    mode = "whitelist" if access.get("mode") == "whitelist" else "blacklist"
    if _is_set(access.get(mode)):
        notes.append(
            f"trigger.access-control.{mode}: the host has no per-binding access list; every chat of the binding's "
            "scope is answered (scope the binding to a bot, or disable the bot)"
        )
    ignore = _section(trigger, "ignore-rules")
    for rule in ("prefix", "regexp"):
        if _is_set(ignore.get(rule)):
            notes.append(
                f"trigger.ignore-rules.{rule}: the host has no per-binding ignore rules; such messages are answered"
            )
    if _is_set(_section(trigger, "message-aggregation").get("enabled")):
        notes.append("trigger.message-aggregation: each message is a run of its own on the host (not merged)")
    return notes


def _unmapped_safety(safety: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    content = _section(safety, "content-filter")
    if _is_set(content.get("check-sensitive-words")):
        notes.append("safety.content-filter: the host does not filter sensitive words")
    if _section(safety, "rate-limit"):
        notes.append(
            "safety.rate-limit: the host limits requests per API key, not messages per chat; the pipeline's "
            "window is not applied"
        )
    return notes


def _unmapped_output(output: dict[str, Any], legacy_runner: str) -> list[str]:
    notes: list[str] = []
    long_text = _section(output, "long-text-processing")
    if long_text.get("strategy") not in (None, "", "none"):
        notes.append(
            f"output.long-text-processing.strategy: {long_text['strategy']!r} — the host sends long replies as "
            "text (the platform adapter splits them)"
        )
    delay = _section(output, "force-delay")
    if _is_set(delay.get("min")) or _is_set(delay.get("max")):
        notes.append("output.force-delay: the host does not delay replies")
    misc = _section(output, "misc")
    if misc.get("exception-handling") not in (None, "", "show-hint") or _is_set(misc.get("failure-hint")):
        notes.append(
            "output.misc.exception-handling/failure-hint: a failed run shows the host's failure, not the "
            "pipeline's hint"
        )
    if _is_set(misc.get("at-sender")):
        notes.append("output.misc.at-sender: replies in groups quote the message instead of @-mentioning the sender")
    if _is_set(misc.get("track-function-calls")):
        notes.append("output.misc.track-function-calls: tool calls are in the run's events, not sent to the chat")
    if _is_set(misc.get("remove-think")) and legacy_runner not in RUNNERS_WITH_REMOVE_THINK:
        notes.append(f"output.misc.remove-think: the {legacy_runner} runner's plugin has no such option")
    return notes


class _DryRunRollbackError(Exception):
    pass


def legacy_config_import(
    *,
    data: Any,
    workspace_slug: str,
    bot_id: str | None = None,
    dry_run: bool = False,
    validate: bool = True,
    allow_missing_runner: bool = False,
    origin: str = "",
) -> LegacyImportResult:
    """Create the binding a pipeline config describes; with `dry_run` everything is checked, nothing kept.
    A runner that is not installed is refused unless `allow_missing_runner` (the binding is then stored
    unchecked and cannot answer until the runner's plugin is installed)."""
    pipeline = legacy_pipeline_parse(data)
    result: LegacyImportResult | None = None
    try:
        with transaction.atomic():
            workspace = workspace_get_or_create(slug=workspace_slug)
            result = _import(
                pipeline,
                workspace=workspace,
                bot_id=bot_id,
                validate=validate,
                allow_missing_runner=allow_missing_runner,
                origin=origin,
                dry_run=dry_run,
            )
            if dry_run:
                raise _DryRunRollbackError
    except _DryRunRollbackError:
        pass
    assert result is not None
    return result


def _import(
    pipeline: LegacyPipeline,
    *,
    workspace: Workspace,
    bot_id: str | None,
    validate: bool,
    allow_missing_runner: bool,
    origin: str,
    dry_run: bool,
) -> LegacyImportResult:
    if bot_id is not None and not Bot.objects.filter(workspace=workspace, bot_id=bot_id).exists():
        raise LegacyImportError(f"there is no bot {bot_id!r} in workspace {workspace.slug!r}")
    spec = BindingIn(
        name=pipeline.name or f"Imported {pipeline.legacy_runner}",
        scope=BindingScopeIn(scope_type="bot", scope_id=bot_id) if bot_id else BindingScopeIn(scope_type="workspace"),
        event_types=[LEGACY_EVENT_TYPE],
        runner_id=pipeline.runner_id,
        runner_config=pipeline.runner_config,
        resource_policy=pipeline.resource_policy,
        delivery_policy=pipeline.delivery_policy,
    )
    descriptor_known = any(
        descriptor.visible_to(workspace.pk)
        for descriptor in RunnerDescriptor.objects.filter(runner_id=pipeline.runner_id).exclude(
            status=RunnerDescriptor.Status.MISSING
        )
    )
    if not descriptor_known and not allow_missing_runner:
        raise LegacyImportError(
            f"runner {pipeline.runner_id} (LangBot's {pipeline.legacy_runner}) is not installed, so the binding "
            "could not answer: install its plugin and refresh the runners, or allow a missing runner to store "
            "the binding unchecked"
        )
    unmapped = [*pipeline.unmapped, *_missing_resources(workspace, pipeline.resource_policy)]
    if not descriptor_known:
        unmapped.append(f"runner: {pipeline.runner_id} is not installed; the binding cannot answer until it is")
    detail = {"origin": origin, "legacy_runner": pipeline.legacy_runner, "unmapped": unmapped}
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
        binding=binding,
        legacy_runner=pipeline.legacy_runner,
        validated=binding.config_validated,
        dry_run=dry_run,
        unmapped=unmapped,
    )


def _missing_resources(workspace: Workspace, policy: ResourcePolicy) -> list[str]:
    """The selected models and knowledge bases the workspace does not have (LangBot named them by uuid: the
    host's resource needs the same id). Unchecked when nothing lists a kind (bindings without resources)."""
    notes: list[str] = []
    for kind, wanted, noun in (
        (ResourceKind.MODELS, policy.allowed_model_ids, "model"),
        (ResourceKind.KNOWLEDGE_BASES, policy.allowed_kb_ids, "knowledge base"),
    ):
        source = resource_catalog_source(kind)
        if source is None or not wanted:
            continue
        present = {entry.id for entry in source(workspace)}
        for resource_id in wanted:
            if resource_id != WILDCARD and resource_id not in present:
                notes.append(
                    f"resource_policy: {noun} {resource_id!r} is not in workspace {workspace.slug!r}; create it with "
                    "this id (or select another in the binding), else runs cannot use it"
                )
    return notes
