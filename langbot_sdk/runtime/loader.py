"""Plugin discovery and loading for the plugin runtime.

Reads plugin directories (the plugin format: docs/packaging.md, "The plugin"), validates the plugin and runner
manifests, imports each runner's Python class and instantiates it once. A plugin with any problem is skipped as a whole
with a recorded reason; the other plugins still load.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import re
import sys
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import ValidationError

from langbot_sdk.protocol import (
    AgentRunnerComponentManifest,
    AgentRunnerManifest,
    PluginLoadReport,
    PluginManifest,
)
from langbot_sdk.runner import AgentRunner

__all__ = [
    "LoadedRunner",
    "PluginLoadError",
    "PluginRegistry",
    "declared_report",
    "load_plugin_paths",
    "load_plugins",
    "plugin_paths",
]

logger = logging.getLogger("langbot_sdk.runtime.loader")

MANIFEST_FILE = "manifest.yaml"
# A manifest is a few KiB; anything far bigger is a mistake, not a plugin.
MAX_YAML_BYTES = 1024 * 1024
_RUNNER_YAML_SUFFIXES = (".yaml", ".yml")
_MODULE_PREFIX = "langbot_plugins"


class PluginLoadError(Exception):
    """Why one plugin could not be loaded; the message is shown to operators as the plugin's error."""


@dataclass(frozen=True)
class LoadedRunner:
    """One runner ready to run: its manifest, its shared instance and the plugin that provides it."""

    manifest: AgentRunnerManifest
    runner: AgentRunner
    plugin_identity: str  # "author/name", stamped as caller_plugin_identity on proxy calls
    plugin_path: str


@dataclass
class PluginRegistry:
    """Everything the runtime loaded: runners by id and one report per plugin directory seen."""

    runners: dict[str, LoadedRunner] = field(default_factory=dict)
    reports: list[PluginLoadReport] = field(default_factory=list)

    @property
    def manifests(self) -> list[AgentRunnerManifest]:
        return [loaded.manifest for loaded in self.runners.values()]


def load_plugins(plugin_dirs: Sequence[str | Path]) -> PluginRegistry:
    """Load every plugin under the given directories, in sorted order, skipping broken ones."""
    registry = PluginRegistry()
    for root in plugin_dirs:
        root_path = Path(root)
        if not root_path.is_dir():
            logger.warning("plugin directory %s does not exist; skipped", root_path)
            continue
        for plugin_path in _plugin_paths(root_path):
            _load_one(plugin_path, registry)
    return registry


def plugin_paths(plugin_dirs: Sequence[str | Path]) -> list[Path]:
    """The plugin directories under `plugin_dirs`, in load order, found without importing anything."""
    found: list[Path] = []
    for root in plugin_dirs:
        root_path = Path(root)
        if root_path.is_dir():
            found.extend(_plugin_paths(root_path))
    return found


def load_plugin_paths(paths: Sequence[str | Path]) -> PluginRegistry:
    """Load the given plugin directories themselves (not directories of plugins): an isolated runtime
    child gets the one plugin it runs."""
    registry = PluginRegistry()
    for path in paths:
        _load_one(Path(path), registry)
    return registry


def declared_report(plugin_path: Path, error: str) -> PluginLoadReport:
    """The error report of a plugin that failed outside the loader (its process died while importing it),
    with what its manifests declare, read without importing its code, so the host can mark its runners."""
    author = name = version = None
    runner_ids: list[str] = []
    with contextlib.suppress(PluginLoadError, ValidationError, ValueError):
        plugin = PluginManifest.model_validate(_read_yaml(plugin_path / MANIFEST_FILE))
        author, name, version = plugin.metadata.author, plugin.metadata.name, plugin.metadata.version
        for yaml_path in _runner_yaml_paths(plugin_path, plugin):
            component = AgentRunnerComponentManifest.model_validate(_read_yaml(yaml_path))
            runner_ids.append(component.to_runner_manifest(plugin).id)
    return PluginLoadReport(
        path=str(plugin_path),
        author=author,
        name=name,
        version=version,
        status="error",
        error=error,
        runner_ids=runner_ids,
    )


def _plugin_paths(root: Path) -> Iterable[Path]:
    for child in sorted(root.iterdir()):
        if child.name.startswith((".", "_")) or not child.is_dir():
            continue
        if (child / MANIFEST_FILE).is_file():
            yield child


def _load_one(plugin_path: Path, registry: PluginRegistry) -> None:
    author = name = version = None
    warnings: list[str] = []
    # Ids read from component YAMLs before a later step failed: the host marks those runners `error`.
    declared_ids: list[str] = []
    try:
        plugin = PluginManifest.model_validate(_read_yaml(plugin_path / MANIFEST_FILE))
        author, name = plugin.metadata.author, plugin.metadata.name
        version = plugin.metadata.version
        warnings.extend(f"{MANIFEST_FILE}: ignored field {path}" for path in plugin.ignored_fields)
        loaded = _load_runners(plugin_path, plugin, warnings, declared_ids)
        for runner in loaded:
            existing = registry.runners.get(runner.manifest.id)
            if existing is not None:
                raise PluginLoadError(
                    f"duplicate runner id {runner.manifest.id} (already provided by {existing.plugin_path})"
                )
    except (PluginLoadError, ValidationError) as exc:
        reason = _describe(exc)
        logger.error("plugin %s skipped: %s", plugin_path, reason)
        registry.reports.append(
            PluginLoadReport(
                path=str(plugin_path),
                author=author,
                name=name,
                version=version,
                status="error",
                error=reason,
                runner_ids=declared_ids,
                warnings=warnings,
            )
        )
        return
    for runner in loaded:
        registry.runners[runner.manifest.id] = runner
    registry.reports.append(
        PluginLoadReport(
            path=str(plugin_path),
            author=author,
            name=name,
            version=version,
            status="loaded",
            error=None,
            runner_ids=[runner.manifest.id for runner in loaded],
            warnings=warnings,
        )
    )
    for warning in warnings:
        logger.warning("plugin %s: %s", plugin_path, warning)
    logger.info("plugin %s/%s %s loaded: %d runner(s)", author, name, version, len(loaded))


def _load_runners(
    plugin_path: Path, plugin: PluginManifest, warnings: list[str], declared_ids: list[str]
) -> list[LoadedRunner]:
    identity = plugin.identity
    loaded: list[LoadedRunner] = []
    seen: set[str] = set()
    for yaml_path in _runner_yaml_paths(plugin_path, plugin):
        try:
            component = AgentRunnerComponentManifest.model_validate(_read_yaml(yaml_path))
        except ValidationError as exc:
            raise PluginLoadError(f"{_relative(yaml_path, plugin_path)}: {_describe(exc)}") from exc
        warnings.extend(
            f"{_relative(yaml_path, plugin_path)}: ignored field {path}" for path in component.ignored_fields
        )
        try:
            manifest = component.to_runner_manifest(plugin)
        except (ValueError, ValidationError) as exc:
            raise PluginLoadError(f"{_relative(yaml_path, plugin_path)}: {exc}") from exc
        if manifest.id in seen:
            raise PluginLoadError(f"duplicate runner id {manifest.id} in {_relative(yaml_path, plugin_path)}")
        seen.add(manifest.id)
        declared_ids.append(manifest.id)
        runner_cls = _import_runner_class(plugin_path, yaml_path, component)
        try:
            instance = runner_cls()
        except Exception as exc:
            raise PluginLoadError(f"{runner_cls.__name__}() failed: {type(exc).__name__}: {exc}") from exc
        loaded.append(
            LoadedRunner(manifest=manifest, runner=instance, plugin_identity=identity, plugin_path=str(plugin_path))
        )
    if not loaded:
        raise PluginLoadError("the plugin declares no AgentRunner component")
    return loaded


def _runner_yaml_paths(plugin_path: Path, plugin: PluginManifest) -> list[Path]:
    paths: list[Path] = []
    for entry in _from_dirs(plugin):
        folder = _inside(plugin_path, plugin_path / entry)
        if not folder.is_dir():
            raise PluginLoadError(f"component directory {entry} does not exist")
        paths.extend(sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in _RUNNER_YAML_SUFFIXES))
    return paths


def _from_dirs(plugin: PluginManifest) -> list[str]:
    runner_component = plugin.spec.components.agent_runner
    if runner_component is None:
        return []
    return [entry.path for entry in runner_component.from_dirs]


def _import_runner_class(
    plugin_path: Path, yaml_path: Path, component: AgentRunnerComponentManifest
) -> type[AgentRunner]:
    python = component.execution.python
    source = _inside(plugin_path, yaml_path.parent / python.path)
    if not source.is_file():
        raise PluginLoadError(f"execution.python.path {python.path} does not exist")
    module = _import_file(plugin_path, source)
    candidate: Any = getattr(module, python.attr, None)
    if candidate is None:
        raise PluginLoadError(f"{python.path} has no attribute {python.attr!r}")
    if not (isinstance(candidate, type) and issubclass(candidate, AgentRunner)) or candidate is AgentRunner:
        raise PluginLoadError(f"{python.path}:{python.attr} is not an AgentRunner subclass")
    return candidate


def _import_file(plugin_path: Path, source: Path) -> ModuleType:
    module_name = _module_name(plugin_path, source)
    spec = importlib.util.spec_from_file_location(module_name, source)
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"cannot import {source.name}")
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so that dataclasses/pydantic inside the plugin can resolve their module.
    sys.modules[module_name] = module
    # The plugin's own folder is importable during the import, so it can import its sibling modules.
    sys.path.insert(0, str(plugin_path))
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(module_name, None)
        raise
    except BaseException as exc:  # a plugin calling sys.exit() at import is a broken plugin, not a stop
        sys.modules.pop(module_name, None)
        raise PluginLoadError(f"importing {source.name} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(plugin_path))
    return module


def _module_name(plugin_path: Path, source: Path) -> str:
    raw = f"{plugin_path.name}_{source.stem}_{zlib.crc32(str(source.resolve()).encode()):08x}"
    return f"{_MODULE_PREFIX}.{re.sub(r'[^0-9A-Za-z_]', '_', raw)}"


def _read_yaml(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise PluginLoadError(f"{path.name} is larger than {MAX_YAML_BYTES} bytes")
        with path.open("rb") as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as exc:
        raise PluginLoadError(f"{path.name} is not valid YAML: {exc}") from exc
    except OSError as exc:
        raise PluginLoadError(f"cannot read {path.name}: {exc}") from exc
    if not isinstance(data, dict):
        raise PluginLoadError(f"{path.name} must contain a YAML mapping")
    return data


def _inside(plugin_path: Path, candidate: Path) -> Path:
    """Resolve a manifest-relative path and refuse one that escapes the plugin directory."""
    root = plugin_path.resolve()
    resolved = candidate.resolve()
    if resolved != root and root not in resolved.parents:
        raise PluginLoadError(f"path {candidate} points outside the plugin directory")
    return resolved


def _relative(path: Path, plugin_path: Path) -> str:
    try:
        return str(path.relative_to(plugin_path))
    except ValueError:
        return str(path)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        problems = [
            f"{'.'.join(str(part) for part in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors(include_url=False)[:10]
        ]
        return "schema error: " + "; ".join(problems)
    return str(exc)
