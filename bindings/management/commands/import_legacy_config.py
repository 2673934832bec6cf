"""`python manage.py import_legacy_config FILE [--workspace slug] [--bot bot_id] [--dry-run]`: turn a LangBot
pipeline config (JSON or YAML) into an AgentBinding of `message.received`, and say what of the pipeline the
binding does not do."""

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bindings.legacy import LegacyImportError, legacy_config_import, legacy_config_load
from bindings.triggers import TriggerPolicy


class Command(BaseCommand):
    help = (
        "Import a LangBot pipeline config: `ai.runner.runner` picks the official runner plugin, the `ai.<runner>` "
        "block becomes the binding's runner config (unchanged), the models, knowledge bases and tools it selects "
        "its resource policy, its trigger rules the binding's trigger filter. What has no equivalent on the host is "
        "listed. Unknown runners, and runners that "
        "are not installed (unless --allow-missing-runner), are refused and nothing is written."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="pipeline config, .json or .yaml")
        parser.add_argument("--workspace", default="default", help="workspace slug (created if needed)")
        parser.add_argument("--bot", default=None, help="scope the binding to this bot of the workspace")
        parser.add_argument("--dry-run", action="store_true", help="check everything, write nothing")
        parser.add_argument(
            "--no-validate", action="store_true", help="store the config unchecked even if the runner is installed"
        )
        parser.add_argument(
            "--allow-missing-runner",
            action="store_true",
            help="store the binding unchecked when its runner is not installed (it cannot answer until it is)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        try:
            result = legacy_config_import(
                data=legacy_config_load(path),
                workspace_slug=options["workspace"],
                bot_id=options["bot"],
                dry_run=options["dry_run"],
                validate=not options["no_validate"],
                allow_missing_runner=options["allow_missing_runner"],
                origin=str(path),
            )
        except LegacyImportError as exc:
            raise CommandError(f"{path}: {exc}; nothing was written") from None
        binding = result.binding
        verb = "would create" if result.dry_run else "created"
        scope = f"bot {binding.scope_id}" if binding.scope_type == "bot" else f"workspace {binding.scope_id}"
        self.stdout.write(
            f"{verb} binding {binding.binding_id} ({scope}): message.received -> {binding.runner_id} "
            f"(from {result.legacy_runner})"
        )
        policy = binding.resource_policy or {}
        allowed = {
            "models": policy.get("allowed_model_ids"),
            "knowledge bases": policy.get("allowed_kb_ids"),
            "tools": policy.get("allowed_tool_names"),
        }
        granted = "; ".join(f"{noun} {', '.join(ids)}" for noun, ids in allowed.items() if ids)
        if granted:
            self.stdout.write(f"resource policy allows: {granted}")
        trigger = {
            key: value
            for key, value in (binding.trigger_policy or {}).items()
            if value != TriggerPolicy().model_dump(mode="json").get(key)
        }
        if trigger:
            self.stdout.write(f"trigger filter: {json.dumps(trigger, ensure_ascii=False)}")
        if not result.validated:
            self.stdout.write(
                "runner config stored unchecked: the runner's plugin is not installed (or --no-validate); "
                "it is checked on the next edit of the binding"
            )
        if result.unmapped:
            self.stdout.write(f"not mapped ({len(result.unmapped)}):")
            for note in result.unmapped:
                self.stdout.write(f"  - {note}")
