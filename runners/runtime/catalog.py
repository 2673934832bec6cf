"""The runner catalog as the plugin runtime reports it: `RunnerDescriptor` rows (a `bindings` table, which
bindings validate against) synced from `list_agent_runners`, bindings of a runner that came back revalidated.
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
from langbot_sdk.protocol import Action, AgentRunnerManifest, ListAgentRunnersResponse, RunnerId
from runners.runtime.link import runtime_link

logger = logging.getLogger(__name__)


@dataclass
class RunnerSyncResult:
    available: list[str] = field(default_factory=list)
    errored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # Plugins that failed before any runner id could be read from them (e.g. a broken manifest.yaml).
    plugin_errors: list[dict[str, Any]] = field(default_factory=list)


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


@transaction.atomic
def runner_descriptors_sync(*, report: ListAgentRunnersResponse) -> RunnerSyncResult:
    """Make the descriptor table match one runtime report.

    A runner whose plugin failed to load keeps its last good manifest and is marked `error`; one the
    runtime no longer reports is marked `missing` (never deleted: bindings and runs still refer to it).
    """
    now = timezone.now()
    result = RunnerSyncResult()
    reported: set[str] = set()

    for manifest in report.runners:
        try:
            fields = _descriptor_fields(manifest)
        except ValueError as exc:
            result.plugin_errors.append({"path": "", "runner_id": manifest.id, "error": str(exc)})
            continue
        RunnerDescriptor.objects.update_or_create(runner_id=manifest.id, defaults={**fields, "last_seen_at": now})
        reported.add(manifest.id)
        result.available.append(manifest.id)

    for plugin in report.plugins:
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
            if key in reported:
                continue
            RunnerDescriptor.objects.update_or_create(
                runner_id=key,
                defaults={
                    "status": RunnerDescriptor.Status.ERROR,
                    "load_error": plugin.error or "",
                    "last_seen_at": now,
                },
                create_defaults={
                    "plugin_author": runner_id.author,
                    "plugin_name": runner_id.plugin,
                    "plugin_version": plugin.version or "",
                    "runner_name": runner_id.runner,
                    "status": RunnerDescriptor.Status.ERROR,
                    "load_error": plugin.error or "",
                    "last_seen_at": now,
                },
            )
            reported.add(key)
            result.errored.append(key)

    gone = RunnerDescriptor.objects.exclude(runner_id__in=reported).exclude(status=RunnerDescriptor.Status.MISSING)
    result.missing = sorted(gone.values_list("runner_id", flat=True))
    gone.update(status=RunnerDescriptor.Status.MISSING, load_error="no longer reported by the plugin runtime")
    for error in result.plugin_errors:
        logger.warning("plugin failed to load: %s", error)
    # Bindings stored before their runner was known (legacy import, demo seed) get checked now.
    for available_id in result.available:
        bindings_revalidate_for_runner(runner_id=available_id)
    return result


def runner_descriptors_refresh(*, connect_wait: float | None = None) -> RunnerSyncResult:
    """Ask the plugin runtime for its runners and sync the descriptors. Raises `RuntimeUnavailable`.
    `connect_wait`: how long to wait for a runtime that is away (default: the link's reconnect wait; 0 for a
    person waiting on the answer, who should hear at once that the runtime is down)."""
    data = runtime_link().call_sync(Action.LIST_AGENT_RUNNERS, {}, connect_wait=connect_wait)
    return runner_descriptors_sync(report=ListAgentRunnersResponse.model_validate(data))
