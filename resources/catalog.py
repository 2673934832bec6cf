"""What the binding form may offer from this app: the workspace's models, tools and knowledge bases as
`bindings.resource_catalog` entries. Registered at start-up by `ResourcesConfig.ready`; read-only."""

from __future__ import annotations

from bindings.models import Workspace
from bindings.resource_catalog import CatalogEntry, ResourceKind, resource_catalog_register
from resources.models import KnowledgeBase, MCPTool
from resources.selectors import model_list


def catalog_models(workspace: Workspace) -> list[CatalogEntry]:
    return [
        CatalogEntry(
            id=model.model_id,
            label=f"{model.model_id} — {model.provider.name}/{model.name} ({model.kind})",
            model_kind=model.kind,
        )
        for model in model_list(workspace=workspace)
    ]


def catalog_tools(workspace: Workspace) -> list[CatalogEntry]:
    tools = MCPTool.objects.filter(workspace=workspace).select_related("server").order_by("tool_name")
    return [CatalogEntry(id=tool.tool_name, label=f"{tool.tool_name} — {tool.server.name}") for tool in tools]


def catalog_knowledge_bases(workspace: Workspace) -> list[CatalogEntry]:
    knowledge_bases = KnowledgeBase.objects.filter(workspace=workspace).order_by("kb_id")
    return [CatalogEntry(id=kb.kb_id, label=f"{kb.kb_id} — {kb.name}") for kb in knowledge_bases]


def resource_catalog_fill() -> None:
    resource_catalog_register(kind=ResourceKind.MODELS, source=catalog_models)
    resource_catalog_register(kind=ResourceKind.TOOLS, source=catalog_tools)
    resource_catalog_register(kind=ResourceKind.KNOWLEDGE_BASES, source=catalog_knowledge_bases)
