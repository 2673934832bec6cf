"""REST endpoints for model providers and models (docs/architecture.md, "The REST API"):
`/api/v1/model-providers[/{provider_id}]`, `/api/v1/models[/{model_id}]`.

Everything is scoped to the caller's workspace; another workspace's object answers 404. Bodies are parsed
by the strict pydantic models of `resources.specs`; validation errors (an unknown `provider_id`, a
non-http(s) `base_url`, an id already taken) answer 400 `invalid_argument` with `details.fields`. A
provider's API key is never returned (`has_api_key` says whether one is stored) and its headers' values
are shown masked. Deleting a provider that models use answers 409 `failed_precondition`, as deleting a bot
that bindings use does; nothing is deleted in cascade.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bindings.access import request_workspace
from bindings.api import WORKSPACE_PARAMETER
from bindings.models import Workspace
from foundation.api_errors import ApiError, invalid_fields
from foundation.api_input import body_parse
from resources.models import Model, ModelProvider
from resources.selectors import (
    model_get,
    model_list,
    model_provider_get,
    model_provider_headers_masked,
    model_provider_list,
)
from resources.services import (
    ResourceInUseError,
    model_create,
    model_delete,
    model_fields,
    model_provider_create,
    model_provider_delete,
    model_provider_update,
    model_update,
)
from resources.specs import ModelIn, ModelKind, ModelPatchIn, ModelProviderIn, ModelProviderPatchIn

_INVALID = OpenApiResponse(description="`invalid_argument` with details.fields")


# --- output shapes (documentation and serialization) -------------------------------------------------


class ModelProviderOut(BaseModel):
    provider_id: str
    name: str
    base_url: str
    headers: dict[str, str] = Field(description="Every value is shown as `********`.")
    timeout_seconds: int
    max_retries: int
    has_api_key: bool = Field(description="Whether a key is stored; the key itself is never returned.")
    created_at: datetime
    updated_at: datetime


class ModelProviderListOut(BaseModel):
    items: list[ModelProviderOut]


class ModelOut(BaseModel):
    model_id: str
    provider_id: str
    name: str
    kind: ModelKind
    supports_tools: bool
    supports_vision: bool
    context_window: int | None
    max_output_tokens: int | None
    input_price_per_million: str | None = Field(
        description=(
            "Price of one million input tokens in the host's cost currency, as a decimal string; null: not priced."
        )
    )
    output_price_per_million: str | None = Field(
        description="Price of one million output tokens, as a decimal string; null: not priced."
    )
    created_at: datetime
    updated_at: datetime

    model_config = ConfigDict(protected_namespaces=())


class ModelListOut(BaseModel):
    items: list[ModelOut]


def model_provider_out(provider: ModelProvider) -> dict[str, Any]:
    return {
        "provider_id": provider.provider_id,
        "name": provider.name,
        "base_url": provider.base_url,
        "headers": model_provider_headers_masked(provider),
        "timeout_seconds": provider.timeout_seconds,
        "max_retries": provider.max_retries,
        "has_api_key": bool(provider.api_key),
        "created_at": provider.created_at.isoformat(),
        "updated_at": provider.updated_at.isoformat(),
    }


def _decimal_text(value: Decimal | None) -> str | None:
    # A string, not a JSON number: a float would turn 0.15 into 0.15000000000000002 somewhere downstream.
    return None if value is None else format(value.normalize(), "f")


def model_out(model: Model) -> dict[str, Any]:
    fields = model_fields(model)
    return {
        "model_id": model.model_id,
        **fields,
        "input_price_per_million": _decimal_text(fields["input_price_per_million"]),
        "output_price_per_million": _decimal_text(fields["output_price_per_million"]),
        "created_at": model.created_at.isoformat(),
        "updated_at": model.updated_at.isoformat(),
    }


# --- helpers -----------------------------------------------------------------------------------------


def _provider_or_404(workspace: Workspace, provider_id: str) -> ModelProvider:
    provider = model_provider_get(workspace=workspace, provider_id=provider_id)
    if provider is None:
        raise ApiError(404, "not_found", f"No model provider {provider_id!r} in this workspace.")
    return provider


def _model_or_404(workspace: Workspace, model_id: str) -> Model:
    model = model_get(workspace=workspace, model_id=model_id)
    if model is None:
        raise ApiError(404, "not_found", f"No model {model_id!r} in this workspace.")
    return model


# --- model providers ---------------------------------------------------------------------------------


class ModelProviderListApi(APIView):
    required_scopes = {"GET": "resources:read", "POST": "resources:write"}

    @extend_schema(
        operation_id="model_providers_list", parameters=[WORKSPACE_PARAMETER], responses=ModelProviderListOut
    )
    def get(self, request: Request) -> Response:
        providers = model_provider_list(workspace=request_workspace(request))
        return Response({"items": [model_provider_out(p) for p in providers]})

    @extend_schema(
        operation_id="model_providers_create",
        parameters=[WORKSPACE_PARAMETER],
        request=ModelProviderIn,
        responses={201: ModelProviderOut, 400: _INVALID},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(ModelProviderIn, request.data)
        provider = model_provider_create(workspace=workspace, spec=spec)
        return Response(model_provider_out(provider), status=status.HTTP_201_CREATED)


class ModelProviderDetailApi(APIView):
    required_scopes = {"GET": "resources:read", "PATCH": "resources:write", "DELETE": "resources:write"}

    @extend_schema(
        operation_id="model_providers_retrieve", parameters=[WORKSPACE_PARAMETER], responses=ModelProviderOut
    )
    def get(self, request: Request, provider_id: str) -> Response:
        return Response(model_provider_out(_provider_or_404(request_workspace(request), provider_id)))

    @extend_schema(
        operation_id="model_providers_update",
        parameters=[WORKSPACE_PARAMETER],
        request=ModelProviderPatchIn,
        responses={200: ModelProviderOut, 400: _INVALID},
    )
    def patch(self, request: Request, provider_id: str) -> Response:
        provider = _provider_or_404(request_workspace(request), provider_id)
        patch = body_parse(ModelProviderPatchIn, request.data)
        provider = model_provider_update(provider=provider, patch=patch)
        return Response(model_provider_out(provider))

    @extend_schema(
        operation_id="model_providers_destroy",
        parameters=[WORKSPACE_PARAMETER],
        responses={204: None, 409: OpenApiResponse(description="`failed_precondition`: models use the provider")},
    )
    def delete(self, request: Request, provider_id: str) -> Response:
        provider = _provider_or_404(request_workspace(request), provider_id)
        try:
            model_provider_delete(provider=provider)
        except ResourceInUseError as exc:
            raise ApiError(409, "failed_precondition", "Models use this provider.", {"fields": exc.fields}) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- models ------------------------------------------------------------------------------------------


class ModelListApi(APIView):
    required_scopes = {"GET": "resources:read", "POST": "resources:write"}

    @extend_schema(
        operation_id="models_list",
        parameters=[
            WORKSPACE_PARAMETER,
            OpenApiParameter("kind", OpenApiTypes.STR, enum=["llm", "embedding", "rerank"]),
            OpenApiParameter("provider_id", OpenApiTypes.STR),
        ],
        responses=ModelListOut,
    )
    def get(self, request: Request) -> Response:
        workspace = request_workspace(request)
        kind = request.query_params.get("kind") or None
        if kind is not None and kind not in Model.Kind.values:
            raise invalid_fields({"kind": "Must be llm, embedding or rerank."})
        models = model_list(workspace=workspace, kind=kind, provider_id=request.query_params.get("provider_id") or None)
        return Response({"items": [model_out(m) for m in models]})

    @extend_schema(
        operation_id="models_create",
        parameters=[WORKSPACE_PARAMETER],
        request=ModelIn,
        responses={201: ModelOut, 400: _INVALID},
    )
    def post(self, request: Request) -> Response:
        workspace = request_workspace(request)
        spec = body_parse(ModelIn, request.data)
        model = model_create(workspace=workspace, spec=spec)
        return Response(model_out(model), status=status.HTTP_201_CREATED)


class ModelDetailApi(APIView):
    required_scopes = {"GET": "resources:read", "PATCH": "resources:write", "DELETE": "resources:write"}

    @extend_schema(operation_id="models_retrieve", parameters=[WORKSPACE_PARAMETER], responses=ModelOut)
    def get(self, request: Request, model_id: str) -> Response:
        return Response(model_out(_model_or_404(request_workspace(request), model_id)))

    @extend_schema(
        operation_id="models_update",
        parameters=[WORKSPACE_PARAMETER],
        request=ModelPatchIn,
        responses={200: ModelOut, 400: _INVALID},
    )
    def patch(self, request: Request, model_id: str) -> Response:
        model = _model_or_404(request_workspace(request), model_id)
        patch = body_parse(ModelPatchIn, request.data)
        model = model_update(model=model, patch=patch)
        return Response(model_out(model))

    @extend_schema(
        operation_id="models_destroy",
        parameters=[WORKSPACE_PARAMETER],
        responses={204: None, 409: OpenApiResponse(description="`failed_precondition`: knowledge bases embed with it")},
    )
    def delete(self, request: Request, model_id: str) -> Response:
        try:
            model_delete(model=_model_or_404(request_workspace(request), model_id))
        except ResourceInUseError as exc:
            raise ApiError(
                409, "failed_precondition", "Knowledge bases embed with this model.", {"fields": exc.fields}
            ) from None
        return Response(status=status.HTTP_204_NO_CONTENT)
