"""Input shapes of knowledge bases (docs/architecture.md, "The REST API"), strict pydantic models shared by the API and
the admin. Unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bindings.specs import Slug

DESCRIPTION_MAX = 10_000


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class KnowledgeBaseIn(_Input):
    kb_id: Slug | None = None
    """Generated from the name when omitted; unique per workspace; cannot change. What bindings allow
    (`resource_policy.allowed_kb_ids`) and runners retrieve from."""
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=DESCRIPTION_MAX)
    embedding_model_id: Slug | None = None
    """A model of kind `embedding` of the workspace: chunks also get dense vectors and retrieval is hybrid.
    Changing it re-ingests every document; null turns vectors off."""


class KnowledgeBasePatchIn(_Input):
    """Any subset of `KnowledgeBaseIn`'s keys; `embedding_model_id` may be set to null."""

    kb_id: Slug | None = None
    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=DESCRIPTION_MAX)
    embedding_model_id: Slug | None = None
