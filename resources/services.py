"""Writes for model providers and models, with their validation, shared by the REST API and the admin.

Secrets: a provider's API key and its extra headers are write-only. A value sent back as the mask
(`SECRET_MASK`) keeps the stored one, so a client or form that read the masked answer can send it back.

A provider's `base_url` passes the outbound address guard when it is set or changed: public addresses
only, unless the operator allowed private ones for the workspace or the host (400 `address.not_allowed`).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from pydantic import ValidationError

from bindings.models import Workspace
from bindings.selectors import workspace_private_addresses_allowed
from foundation.api_errors import FieldsRefusedError, field_errors
from foundation.crypto import SECRET_MASK
from foundation.ids import free_slug
from foundation.outbound import url_checked
from resources.models import Model, ModelProvider
from resources.specs import ModelIn, ModelPatchIn, ModelProviderIn, ModelProviderPatchIn


class ResourceValidationError(FieldsRefusedError):
    """Field-level problems with a provider or model: `{"dotted.field": message}`."""


class ResourceInUseError(FieldsRefusedError):
    """The object cannot be deleted while others use it; `fields` names them."""


def _refuse_nulls(patch: ModelProviderPatchIn | ModelPatchIn, nullable: frozenset[str] = frozenset()) -> None:
    nulls = {name: "May not be null." for name in patch.model_fields_set - nullable if getattr(patch, name) is None}
    if nulls:
        raise ResourceValidationError(nulls)


def _merged(model: type[Any], stored: dict[str, Any], patch: Any) -> Any:
    try:
        return model.model_validate({**stored, **patch.model_dump(mode="json", include=patch.model_fields_set)})
    except ValidationError as exc:
        raise ResourceValidationError(field_errors(exc)) from None


def _save(obj: ModelProvider | Model, *, id_field: str) -> None:
    """Save; a racing duplicate id becomes a field error."""
    try:
        with transaction.atomic():
            obj.save()
    except IntegrityError as exc:
        value = getattr(obj, id_field)
        raise ResourceValidationError({id_field: f"{value!r} already exists in this workspace."}) from exc


# --- model providers ---------------------------------------------------------------------------------


def provider_secret_merge(
    *, api_key: str, headers: dict[str, str], provider: ModelProvider | None
) -> tuple[str, dict[str, str]]:
    """The API key and headers as given, with masked values replaced by the stored ones; a mask with
    nothing stored is an error."""
    stored_key = (provider.api_key or "") if provider is not None else ""
    stored_headers = (provider.headers or {}) if provider is not None else {}
    if api_key == SECRET_MASK:
        if not stored_key:
            raise ResourceValidationError({"api_key": "There is no stored key to keep; send the key."})
        api_key = stored_key
    merged: dict[str, str] = {}
    for name, value in headers.items():
        if value == SECRET_MASK:
            if name not in stored_headers:
                raise ResourceValidationError({f"headers.{name}": "There is no stored value to keep; send the value."})
            merged[name] = stored_headers[name]
        else:
            merged[name] = value
    return api_key, merged


def provider_base_url_checked(*, workspace: Workspace, base_url: str) -> str:
    """`base_url` when the workspace may reach its address; raises `URLRefusedError` naming `base_url`."""
    allow_private = workspace_private_addresses_allowed(workspace=workspace)
    return url_checked(base_url, allow_private=allow_private, field="base_url")


def _provider_apply(provider: ModelProvider, spec: ModelProviderIn) -> ModelProvider:
    # Checked when set: a provider saved while allowed keeps working for edits of its other fields, and
    # its connections are refused at connect time once the operator withdraws private addresses.
    if provider.pk is None or spec.base_url != provider.base_url:
        provider_base_url_checked(workspace=provider.workspace, base_url=spec.base_url)
    api_key, headers = provider_secret_merge(
        api_key=spec.api_key, headers=spec.headers, provider=provider if provider.pk else None
    )
    provider.name = spec.name
    provider.base_url = spec.base_url
    provider.api_key = api_key
    provider.headers = headers
    provider.timeout_seconds = spec.timeout_seconds
    provider.max_retries = spec.max_retries
    _save(provider, id_field="provider_id")
    return provider


@transaction.atomic
def model_provider_create(*, workspace: Workspace, spec: ModelProviderIn) -> ModelProvider:
    def taken(provider_id: str) -> bool:
        return ModelProvider.objects.filter(workspace=workspace, provider_id=provider_id).exists()

    if spec.provider_id is not None and taken(spec.provider_id):
        raise ResourceValidationError({"provider_id": f"{spec.provider_id!r} already exists in this workspace."})
    provider_id = spec.provider_id or free_slug(base=spec.name, taken=taken, fallback="provider")
    return _provider_apply(ModelProvider(workspace=workspace, provider_id=provider_id), spec)


def _provider_input(provider: ModelProvider) -> dict[str, Any]:
    """A stored provider as the input that would create it, secrets masked."""
    return {
        "name": provider.name,
        "base_url": provider.base_url,
        "api_key": SECRET_MASK if provider.api_key else "",
        "headers": dict.fromkeys(provider.headers or {}, SECRET_MASK),
        "timeout_seconds": provider.timeout_seconds,
        "max_retries": provider.max_retries,
    }


@transaction.atomic
def model_provider_update(*, provider: ModelProvider, patch: ModelProviderPatchIn) -> ModelProvider:
    """Apply a PATCH: given keys replace stored ones (`headers` as a whole); the result is validated as a
    whole provider."""
    _refuse_nulls(patch)
    if patch.provider_id is not None and patch.provider_id != provider.provider_id:
        raise ResourceValidationError({"provider_id": "A provider's id cannot be changed."})
    spec = _merged(ModelProviderIn, _provider_input(provider), patch.model_copy(update={"provider_id": None}))
    return _provider_apply(provider, spec)


def model_provider_delete(*, provider: ModelProvider) -> None:
    """Delete a provider no model uses; its models would otherwise be left without an endpoint."""
    users = sorted(Model.objects.filter(provider=provider).values_list("model_id", flat=True))
    if users:
        raise ResourceInUseError(
            {"provider_id": f"Models use this provider: {', '.join(users)}. Delete them or move them first."}
        )
    provider.delete()


# --- models ------------------------------------------------------------------------------------------


def _provider_for(*, workspace: Workspace, provider_id: str) -> ModelProvider:
    provider = ModelProvider.objects.filter(workspace=workspace, provider_id=provider_id).first()
    if provider is None:
        raise ResourceValidationError({"provider_id": f"There is no model provider {provider_id!r} in this workspace."})
    return provider


def _model_apply(model: Model, spec: ModelIn) -> Model:
    model.provider = _provider_for(workspace=model.workspace, provider_id=spec.provider_id)
    model.name = spec.name
    model.kind = spec.kind
    model.supports_tools = spec.supports_tools
    model.supports_vision = spec.supports_vision
    model.context_window = spec.context_window
    model.max_output_tokens = spec.max_output_tokens
    model.input_price_per_million = spec.input_price_per_million
    model.output_price_per_million = spec.output_price_per_million
    _save(model, id_field="model_id")
    return model


@transaction.atomic
def model_create(*, workspace: Workspace, spec: ModelIn) -> Model:
    def taken(model_id: str) -> bool:
        return Model.objects.filter(workspace=workspace, model_id=model_id).exists()

    if spec.model_id is not None and taken(spec.model_id):
        raise ResourceValidationError({"model_id": f"{spec.model_id!r} already exists in this workspace."})
    model_id = spec.model_id or free_slug(base=spec.name, taken=taken, fallback="model")
    return _model_apply(Model(workspace=workspace, model_id=model_id), spec)


def model_fields(model: Model) -> dict[str, Any]:
    """A model as its input shape (`ModelIn` without the id): what a PATCH merges into, and what answers show."""
    return {
        "provider_id": model.provider.provider_id,
        "name": model.name,
        "kind": model.kind,
        "supports_tools": model.supports_tools,
        "supports_vision": model.supports_vision,
        "context_window": model.context_window,
        "max_output_tokens": model.max_output_tokens,
        "input_price_per_million": model.input_price_per_million,
        "output_price_per_million": model.output_price_per_million,
    }


@transaction.atomic
def model_update(*, model: Model, patch: ModelPatchIn) -> Model:
    _refuse_nulls(
        patch,
        nullable=frozenset(
            {"context_window", "max_output_tokens", "input_price_per_million", "output_price_per_million"}
        ),
    )
    if patch.model_id is not None and patch.model_id != model.model_id:
        raise ResourceValidationError({"model_id": "A model's id cannot be changed."})
    spec = _merged(ModelIn, model_fields(model), patch.model_copy(update={"model_id": None}))
    return _model_apply(model, spec)


def model_delete(*, model: Model) -> None:
    """Delete a model no knowledge base embeds with; their vectors would otherwise lose their meaning."""
    users = sorted(model.knowledge_bases.values_list("kb_id", flat=True))
    if users:
        raise ResourceInUseError(
            {"model_id": f"Knowledge bases embed with this model: {', '.join(users)}. Change them first."}
        )
    model.delete()
