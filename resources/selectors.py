"""Reads for model providers and models, and their masked views (what the API and admin may show)."""

from __future__ import annotations

from django.db.models import QuerySet

from bindings.models import Workspace
from foundation.crypto import SECRET_MASK
from resources.models import Model, ModelProvider


def model_provider_list(*, workspace: Workspace) -> QuerySet[ModelProvider]:
    return ModelProvider.objects.filter(workspace=workspace).order_by("provider_id")


def model_provider_get(*, workspace: Workspace, provider_id: str) -> ModelProvider | None:
    return ModelProvider.objects.filter(workspace=workspace, provider_id=provider_id).first()


def model_provider_headers_masked(provider: ModelProvider) -> dict[str, str]:
    return dict.fromkeys(provider.headers or {}, SECRET_MASK)


def model_list(*, workspace: Workspace, kind: str | None = None, provider_id: str | None = None) -> QuerySet[Model]:
    queryset = Model.objects.filter(workspace=workspace).select_related("provider__workspace")
    if kind is not None:
        queryset = queryset.filter(kind=kind)
    if provider_id is not None:
        queryset = queryset.filter(provider__provider_id=provider_id)
    return queryset.order_by("model_id")


def model_get(*, workspace: Workspace, model_id: str) -> Model | None:
    return Model.objects.filter(workspace=workspace, model_id=model_id).select_related("provider__workspace").first()


def models_by_id(*, workspace_id: int, model_ids: list[str] | None) -> dict[str, Model]:
    """The workspace's models among `model_ids` (all of them when None: a policy allowing every model to a
    runner with no model selector), keyed by model id, in one query (the run's snapshot)."""
    rows = Model.objects.filter(workspace_id=workspace_id)
    rows = rows.order_by("model_id") if model_ids is None else rows.filter(model_id__in=model_ids)
    return {row.model_id: row for row in rows}


def model_with_provider(*, workspace_id: int, model_id: str) -> Model | None:
    """A model of the workspace with its provider loaded (a run's model call)."""
    # With the provider's workspace: its address policy is read where no query may run (the event loop).
    return (
        Model.objects.filter(workspace_id=workspace_id, model_id=model_id).select_related("provider__workspace").first()
    )
