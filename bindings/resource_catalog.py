"""The port through which the binding form lists a workspace's host resources.

Models, tools and knowledge bases live in `resources`, a layer above `bindings`, so the binding admin
cannot read them itself. `resources` registers one source per kind of resource at start-up
(`resources.apps.ResourcesConfig.ready`); a source answers, for one workspace, the entries a binding may
name: the public id (`model_id`, `tool_name`, `kb_id`) and a label to show. With no source registered for
a kind (a unit test of bindings alone, a host without the resources app) the form falls back to free text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from bindings.models import Workspace


class ResourceKind(StrEnum):
    MODELS = "models"
    TOOLS = "tools"
    KNOWLEDGE_BASES = "knowledge_bases"


@dataclass(frozen=True)
class CatalogEntry:
    """One resource a binding may name."""

    id: str
    label: str
    model_kind: str = ""
    """A model's kind (`llm`, `embedding`, `rerank`), which a model selector may filter on; empty otherwise."""


CatalogSource = Callable[[Workspace], list[CatalogEntry]]

_sources: dict[ResourceKind, CatalogSource] = {}


def resource_catalog_register(*, kind: ResourceKind, source: CatalogSource) -> None:
    """Make `source` the lister of `kind`; registering again replaces it (a reloaded app)."""
    _sources[kind] = source


def resource_catalog_unregister(*, kind: ResourceKind) -> None:
    _sources.pop(kind, None)


def resource_catalog_source(kind: ResourceKind) -> CatalogSource | None:
    """The registered lister of `kind`, or None when nothing lists it (the form then takes free text)."""
    return _sources.get(kind)
