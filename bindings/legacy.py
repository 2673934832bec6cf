"""Import of a LangBot pipeline config as an AgentBinding that answers.

The pipeline's `ai.runner.runner` names a built-in runner of old LangBot; it maps to the official runner
plugin (README.md, "Official runners"), and the pipeline's `ai.<runner>` block becomes the binding's
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
* `trigger`: the binding handles `message.received` in its scope, and its `trigger_policy` (the gateway's
  per-binding filter, `bindings.triggers`) takes LangBot's group rules (`at` → `group_mention`, `prefix`
  → `group_prefixes`, stripped as LangBot did, `regexp` → `group_patterns`), its ignore rules and its
  access-control list (`blacklist` → deny, `whitelist` → allow; `group_<id>` → a group chat id,
  `person_<id>` → a private chat's user id, `*` kept). Reported: the `random` group rule and message
  aggregation (no equivalent); that the platform adapters forward only group messages that address the
  bot (mention, reply or command), so a prefix or regexp rule picks among those and a prefixed group
  message that does not @-mention the bot is not seen; group ids of an import not made for a QQ bot,
  which are kept as written (a QQ bot's chats are `group:<number>`: an import for a QQ bot writes that);
  rules the filter cannot hold (an invalid or too long pattern, an unknown list entry), dropped by name.
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
from bindings.triggers import PATTERN_MAX_CHARS, RULES_MAX, TriggerPolicy
from foundation.storable import unstorable_text_path

# README.md, "Official runners": old built-in runner → runner id of its official plugin.
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
    trigger_policy: TriggerPolicy = field(default_factory=TriggerPolicy)
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
    trigger_policy, trigger_notes = _trigger_policy(_section(config, "trigger"))
    return LegacyPipeline(
        name=name,
        legacy_runner=legacy_runner,
        runner_id=LEGACY_RUNNER_IDS[legacy_runner],
        runner_config=runner_config,
        resource_policy=_resource_policy(legacy_runner, block),
        trigger_policy=trigger_policy,
        unmapped=[
            *_unmapped_runner_settings(_section(ai, "runner")),
            *trigger_notes,
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


def _trigger_policy(trigger: dict[str, Any]) -> tuple[TriggerPolicy, list[str]]:
    """LangBot's trigger section as a binding's trigger filter, and what of it the filter cannot do."""
    notes: list[str] = []
    group = _section(trigger, "group-respond-rules")
    prefixes = _texts(group.get("prefix"), "trigger.group-respond-rules.prefix", max_chars=100, notes=notes)
    patterns = _patterns(group.get("regexp"), "trigger.group-respond-rules.regexp", notes)
    if prefixes or patterns:
        notes.append(
            "trigger.group-respond-rules.prefix/regexp: the platform adapters forward only group messages that "
            "address the bot (mention, reply, command), so in groups these rules pick among those; a prefixed "
            "message that does not @-mention the bot does not reach the host"
        )
    if _is_set(group.get("random")):
        notes.append("trigger.group-respond-rules.random: the host does not answer group messages at random")
    ignore = _section(trigger, "ignore-rules")
    access = _section(trigger, "access-control")
    mode = "whitelist" if access.get("mode") == "whitelist" else "blacklist"
    lists = _access_lists(access.get(mode), f"trigger.access-control.{mode}", notes)
    policy = TriggerPolicy(
        group_mention=group.get("at", True) is not False,
        group_prefixes=prefixes,
        group_patterns=patterns,
        ignore_prefixes=_texts(ignore.get("prefix"), "trigger.ignore-rules.prefix", max_chars=100, notes=notes),
        ignore_patterns=_patterns(ignore.get("regexp"), "trigger.ignore-rules.regexp", notes),
        access_mode="allow" if mode == "whitelist" else "deny",
        access_group_chat_ids=lists["group"],
        access_private_user_ids=lists["person"],
    )
    if _is_set(_section(trigger, "message-aggregation").get("enabled")):
        notes.append("trigger.message-aggregation: each message is a run of its own on the host (not merged)")
    return policy, notes


def _texts(value: Any, where: str, *, max_chars: int, notes: list[str]) -> list[str]:
    """The non-empty strings of a LangBot list the filter can hold; the others are named in `notes`."""
    items = [item for item in (value if isinstance(value, list) else []) if isinstance(item, str) and item]
    kept = [item for item in items if len(item) <= max_chars]
    if len(kept) < len(items):
        notes.append(f"{where}: entries longer than {max_chars} characters dropped")
    if len(kept) > RULES_MAX:
        notes.append(f"{where}: only the first {RULES_MAX} of {len(kept)} entries kept")
    return list(dict.fromkeys(kept))[:RULES_MAX]


def _patterns(value: Any, where: str, notes: list[str]) -> list[str]:
    kept: list[str] = []
    for pattern in _texts(value, where, max_chars=PATTERN_MAX_CHARS, notes=notes):
        try:
            TriggerPolicy(group_patterns=[pattern])
        except ValueError:
            notes.append(f"{where}: {pattern!r} is not a regular expression the host can run; dropped")
            continue
        kept.append(pattern)
    return kept


def _access_lists(value: Any, where: str, notes: list[str]) -> dict[str, list[str]]:
    """LangBot's `group_<id>` / `person_<id>` entries (`*` for every one) as group chat ids and private
    chats' user ids."""
    lists: dict[str, list[str]] = {"group": [], "person": []}
    for entry in _texts(value, where, max_chars=255, notes=notes):
        kind, _, chat = entry.partition("_")
        if kind in lists and chat.strip():
            lists[kind].append(chat.strip())
        else:
            notes.append(f"{where}: {entry!r} is neither group_<id> nor person_<id>; dropped")
    return lists


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
    bot = Bot.objects.filter(workspace=workspace, bot_id=bot_id).first() if bot_id is not None else None
    if bot_id is not None and bot is None:
        raise LegacyImportError(f"there is no bot {bot_id!r} in workspace {workspace.slug!r}")
    trigger_policy, trigger_notes = _trigger_policy_for_bot(pipeline.trigger_policy, bot)
    spec = BindingIn(
        name=pipeline.name or f"Imported {pipeline.legacy_runner}",
        scope=BindingScopeIn(scope_type="bot", scope_id=bot_id) if bot_id else BindingScopeIn(scope_type="workspace"),
        event_types=[LEGACY_EVENT_TYPE],
        runner_id=pipeline.runner_id,
        runner_config=pipeline.runner_config,
        resource_policy=pipeline.resource_policy,
        delivery_policy=pipeline.delivery_policy,
        trigger_policy=trigger_policy,
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
    unmapped = [*pipeline.unmapped, *trigger_notes, *_missing_resources(workspace, pipeline.resource_policy)]
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


def _trigger_policy_for_bot(policy: TriggerPolicy, bot: Bot | None) -> tuple[TriggerPolicy, list[str]]:
    """Group chat ids as the bot's adapter writes them: LangBot named a QQ group by its number, the host's
    OneBot adapter names its chat `group:<number>`. Without a bot the ids stay as written, and are named."""
    groups = [chat for chat in policy.access_group_chat_ids if chat != "*"]
    if not groups:
        return policy, []
    if bot is None:
        return policy, [
            f"trigger.access-control: group ids {', '.join(groups)} kept as LangBot wrote them; a QQ (OneBot) "
            "bot's group chats are `group:<number>` — import for the bot (--bot) or edit the binding's "
            "access_group_chat_ids"
        ]
    if bot.platform != Bot.Platform.QQ:
        return policy, []
    ids = [
        chat if chat == "*" or chat.startswith("group:") else f"group:{chat}" for chat in policy.access_group_chat_ids
    ]
    return policy.model_copy(update={"access_group_chat_ids": ids}), []


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
