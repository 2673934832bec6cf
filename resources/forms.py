"""Admin forms for model providers and models.

Validation is the API's (`resources.specs`, `resources.services`), its field errors shown on the matching
form fields. The API key and the headers' values are shown as the mask; a mask that comes back keeps the
stored value.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from django import forms
from django.db.models import Model as DjangoModel
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from pydantic import ValidationError

from foundation.api_errors import field_errors
from foundation.crypto import SECRET_MASK
from foundation.outbound import URLRefusedError
from resources.models import Model, ModelProvider
from resources.selectors import model_provider_headers_masked
from resources.services import ResourceValidationError, provider_base_url_checked, provider_secret_merge
from resources.specs import ModelProviderIn

_M = TypeVar("_M", bound=DjangoModel)


class SpecAdminForm(forms.ModelForm[_M]):
    """An admin form whose values are checked by the same input spec and services as the REST API: their
    field errors (`{"dotted.key": message}`) land on the form field that edits the key — `spec_inputs`
    maps a key to a differently named input field — or, for a key no field edits, on the form."""

    spec_inputs: ClassVar[dict[str, str]] = {}

    def add_spec_errors(self, fields: dict[str, str]) -> None:
        for key, message in fields.items():
            head = key.split(".", 1)[0]
            name = self.spec_inputs.get(head, head)
            if name in self.fields and name not in self.errors:
                self.add_error(name, message)
            elif name not in self.fields:
                self.add_error(None, f"{key}: {message}")


class ModelProviderAdminForm(SpecAdminForm[ModelProvider]):
    spec_inputs = {"api_key": "api_key_input", "headers": "headers_input"}

    api_key_input = forms.CharField(
        label=_("API key"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=True),
        help_text=format_lazy(
            _("A stored key shows as {mask}; leave it so to keep it. Empty: the endpoint needs none."), mask=SECRET_MASK
        ),
    )
    headers_input = forms.JSONField(
        label=_("Extra headers"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=format_lazy(
            _(
                'A JSON object, e.g. {{"X-Org": "acme"}}. Stored values show as {mask}; leave them so to keep them. '
                "A header removed here is deleted."
            ),
            mask=SECRET_MASK,
        ),
    )

    class Meta:
        model = ModelProvider
        fields = ["workspace", "provider_id", "name", "base_url", "timeout_seconds", "max_retries"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_key = ""
        self.headers: dict[str, str] = {}
        if self.instance.pk:
            self.initial["api_key_input"] = SECRET_MASK if self.instance.api_key else ""
            self.initial["headers_input"] = model_provider_headers_masked(self.instance)

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        headers = cleaned.get("headers_input")
        values = {
            "name": cleaned.get("name") or "",
            "base_url": cleaned.get("base_url") or "",
            "api_key": cleaned.get("api_key_input") or "",
            "headers": {} if headers in (None, "") else headers,
            "timeout_seconds": cleaned.get("timeout_seconds"),
            "max_retries": cleaned.get("max_retries"),
        }
        try:
            spec = ModelProviderIn.model_validate(values)
            self.api_key, self.headers = provider_secret_merge(
                api_key=spec.api_key, headers=spec.headers, provider=self.instance if self.instance.pk else None
            )
        except ValidationError as exc:
            self.add_spec_errors(field_errors(exc))
            return cleaned
        except ResourceValidationError as exc:
            self.add_spec_errors(exc.fields)
            return cleaned
        workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.pk else None)
        moved = not self.instance.pk or spec.base_url != self.instance.base_url or "workspace" in self.changed_data
        if workspace is not None and moved:
            try:
                provider_base_url_checked(workspace=workspace, base_url=spec.base_url)
            except URLRefusedError as exc:
                self.add_spec_errors(exc.fields)
                return cleaned
        cleaned["base_url"] = spec.base_url
        return cleaned


class ModelAdminForm(forms.ModelForm[Model]):
    class Meta:
        model = Model
        fields = [
            "workspace",
            "model_id",
            "provider",
            "name",
            "kind",
            "supports_tools",
            "supports_vision",
            "context_window",
            "max_output_tokens",
            "input_price_per_million",
            "output_price_per_million",
        ]

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        # On change the workspace is read-only, so it comes from the instance.
        workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.workspace_id else None)
        provider = cleaned.get("provider")
        if workspace is not None and provider is not None and provider.workspace_id != workspace.pk:
            self.add_error("provider", "The provider belongs to another workspace.")
        return cleaned
