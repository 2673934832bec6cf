"""The runner catalog as a runtime reports it: `RunnerDescriptor` rows (a `bindings` table, which bindings
validate against) synced from one `list_agent_runners` report, and bindings of a runner that came back
revalidated. Every runtime's report goes through here: the plugin runtime's (`catalog`), a development
runtime's (`dev_access`) and LangBot's (`langbot.catalog`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from bindings.models import RunnerDescriptor
from bindings.services import bindings_revalidate_for_runner
from langbot_sdk.protocol import AgentRunnerManifest, ListAgentRunnersResponse, RunnerId

logger = logging.getLogger(__name__)


@dataclass
class RunnerSyncResult:
    available: list[str] = field(default_factory=list)
    errored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # Plugins that failed before any runner id could be read from them (e.g. a broken manifest.yaml).
    plugin_errors: list[dict[str, Any]] = field(default_factory=list)
    # What loaded plugins reported dropping or not supporting (`PluginLoadReport.warnings`), one per warning.
    plugin_warnings: list[dict[str, Any]] = field(default_factory=list)


def source_label(source: str) -> str:
    return str(RunnerDescriptor.Source(source).label)


def manifest_digest(manifest: dict[str, Any]) -> str:
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _descriptor_fields(manifest: AgentRunnerManifest) -> dict[str, Any]:
    dumped = manifest.model_dump(mode="json")
    runner_id = RunnerId.parse(manifest.id)
    plugin_meta = dumped.get("metadata", {}).get("plugin", {})
    return {
        "plugin_author": runner_id.author,
        "plugin_name": runner_id.plugin,
        "plugin_version": str(plugin_meta.get("version") or ""),
        "runner_name": runner_id.runner,
        "label": dumped.get("label") or {},
        "description": dumped.get("description") or {},
        "capabilities": dumped["capabilities"],
        "permissions": dumped["permissions"],
        "context_policy": dumped["context"],
        "config_schema": dumped["config_schema"],
        "manifest": dumped,
        "manifest_sha256": manifest_digest(dumped),
        "status": RunnerDescriptor.Status.AVAILABLE,
        "load_error": "",
    }


def _held_elsewhere(runner_id: str, owner: dict[str, Any]) -> RunnerDescriptor | None:
    """The descriptor of `runner_id` when another source (or another connection or workspace of this one)
    serves it now; a missing runner is free to be taken over."""
    other = (
        RunnerDescriptor.objects.filter(runner_id=runner_id)
        .exclude(status=RunnerDescriptor.Status.MISSING)
        .only("source", "source_key", "workspace_id")
        .first()
    )
    if other is None:
        return None
    if (other.source, other.source_key, other.workspace_id) == (
        owner["source"],
        owner["source_key"],
        owner["workspace_id"],
    ):
        return None
    return other


def _held_message(other: RunnerDescriptor, owner: dict[str, Any]) -> str:
    """Why a runner id cannot be taken. Another workspace's development runner is not named as such: a
    tenant must not learn which runner ids another workspace is developing."""
    if other.workspace_id is not None and other.workspace_id != owner["workspace_id"]:
        return f"runner id {other.runner_id} is taken; give the runner another id"
    return f"runner id {other.runner_id} is already served by the {other.get_source_display()}"


def _source_owner(source: str, source_key: str, workspace_id: int | None) -> dict[str, Any]:
    return {"source": source, "source_key": source_key, "workspace_id": workspace_id}


@transaction.atomic
def runner_descriptors_sync(
    *,
    report: ListAgentRunnersResponse,
    source: str = RunnerDescriptor.Source.RUNTIME,
    source_key: str = "",
    workspace_id: int | None = None,
    keep_unreported: bool = False,
) -> RunnerSyncResult:
    """Make the descriptors of one runtime (`source`, `source_key`) match its report.

    A runner whose plugin failed to load keeps its last good manifest and is marked `error`; one the
    runtime no longer reports is marked `missing` (never deleted: bindings and runs still refer to it).
    A runner id another runtime serves is refused (listed in `plugin_errors`), never taken from it.
    `workspace_id` limits the runners to one workspace (development runtimes). `keep_unreported`: the report
    may be incomplete (the runtime is still starting its plugins), so runners it lacks are not marked missing.
    """
    now = timezone.now()
    result = RunnerSyncResult()
    reported: set[str] = set()
    owner = _source_owner(source, source_key, workspace_id)

    for manifest in report.runners:
        try:
            fields = _descriptor_fields(manifest)
        except ValueError as exc:
            result.plugin_errors.append({"path": "", "runner_id": manifest.id, "error": str(exc)})
            continue
        other = _held_elsewhere(manifest.id, owner)
        if other is not None:
            result.plugin_errors.append({"path": "", "runner_id": manifest.id, "error": _held_message(other, owner)})
            continue
        RunnerDescriptor.objects.update_or_create(
            runner_id=manifest.id, defaults={**fields, **owner, "last_seen_at": now}
        )
        reported.add(manifest.id)
        result.available.append(manifest.id)

    for plugin in report.plugins:
        result.plugin_warnings.extend(
            {"path": plugin.path, "plugin": plugin.name, "warning": warning} for warning in plugin.warnings
        )
        if plugin.status != "error":
            continue
        valid_ids = []
        for raw_id in plugin.runner_ids:
            try:
                valid_ids.append(RunnerId.parse(raw_id))
            except ValueError:
                continue
        if not valid_ids:
            result.plugin_errors.append({"path": plugin.path, "plugin": plugin.name, "error": plugin.error})
            continue
        for runner_id in valid_ids:
            key = str(runner_id)
            if key in reported or _held_elsewhere(key, owner) is not None:
                continue
            RunnerDescriptor.objects.update_or_create(
                runner_id=key,
                defaults={
                    "status": RunnerDescriptor.Status.ERROR,
                    "load_error": plugin.error or "",
                    "last_seen_at": now,
                    **owner,
                },
                create_defaults={
                    "plugin_author": runner_id.author,
                    "plugin_name": runner_id.plugin,
                    "plugin_version": plugin.version or "",
                    "runner_name": runner_id.runner,
                    **owner,
                    "status": RunnerDescriptor.Status.ERROR,
                    "load_error": plugin.error or "",
                    "last_seen_at": now,
                },
            )
            reported.add(key)
            result.errored.append(key)

    if not keep_unreported:
        gone = (
            RunnerDescriptor.objects.filter(source=source, source_key=source_key)
            .exclude(runner_id__in=reported)
            .exclude(status=RunnerDescriptor.Status.MISSING)
        )
        result.missing = sorted(gone.values_list("runner_id", flat=True))
        gone.update(
            status=RunnerDescriptor.Status.MISSING, load_error=f"no longer reported by the {source_label(source)}"
        )
    for error in result.plugin_errors:
        logger.warning("plugin failed to load: %s", error)
    # Bindings stored before their runner was known (legacy import, demo seed) get checked now.
    for available_id in result.available:
        bindings_revalidate_for_runner(runner_id=available_id)
    return result
