"""Admin forms for bots and bindings.

A binding's runner config is edited through real form fields, one per item of the selected runner's
config schema (named `cfg__<item>`). The admin builds the form class for one runner at a time: the runner
comes from the posted data, `?runner_id=` or the stored binding, and changing the runner select reloads
the page with `?runner_id=`. Validation is `bindings.services.binding_prepare`, the same as the API's;
its field errors are shown on the matching form fields. Secrets are shown as the mask, and a mask that
comes back keeps the stored secret.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django import forms
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.forms.fields import InvalidJSONInput
from pydantic import ValidationError

from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from bindings.policies import DeliveryPolicy, ResourcePolicy, StatePolicy
from bindings.runner_config import config_schema_items
from bindings.selectors import binding_runner_config_masked, bot_credentials_masked
from bindings.services import BindingValidationError, binding_prepare, credentials_merge
from bindings.specs import BindingIn
from langbot_host.core.api_errors import field_errors
from langbot_host.core.crypto import SECRET_MASK
from langbot_host.core.storable import UNSTORABLE_MESSAGE, is_storable, unstorable_text_path
from langbot_sdk.protocol.manifest import DynamicFormItemSchema, DynamicFormItemType

CONFIG_FIELD_PREFIX = "cfg__"


def _text(value: Any) -> str:
    if value is None:
        return ""
    root = getattr(value, "root", value)
    if isinstance(root, dict):
        return str(root.get("en_US") or next(iter(root.values()), ""))
    return str(root)


def _json_text(value: Any, **options: Any) -> str:
    """JSON to show in a field again; escaped to ASCII when it holds a lone surrogate, which a page
    cannot carry."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return text if is_storable(text) else json.dumps(value, **options)


def _refuse_unstorable(value: Any) -> None:
    # A form field's text cannot hold NUL (Django refuses it), but JSON escapes can.
    if unstorable_text_path(value) is not None:
        raise forms.ValidationError(UNSTORABLE_MESSAGE)


class StorableJSONField(forms.JSONField):
    """A JSON field that refuses text the database cannot store."""

    def validate(self, value: Any) -> None:
        super().validate(value)
        _refuse_unstorable(value)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value
        return _json_text(value, cls=self.encoder)


class PromptField(forms.CharField):
    """A prompt: plain text, or a JSON list of {role, content} messages."""

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value) or ""
        if text.strip().startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                raise forms.ValidationError("Not valid JSON: write plain text or a JSON list of messages.") from None
        return text

    def validate(self, value: Any) -> None:
        super().validate(value)
        _refuse_unstorable(value)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return _json_text(value, indent=2)
        return value


class LinesField(forms.CharField):
    """A list of strings, one per line."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(str(v) for v in value)
        return value


def config_form_field(item: DynamicFormItemSchema, *, has_stored_secret: bool = False) -> forms.Field:
    """The Django form field for one config schema item."""
    options: dict[str, Any] = {
        "label": _text(item.label) or item.name,
        "help_text": _text(item.description),
        "required": item.required,
    }
    kind = item.type
    if kind is DynamicFormItemType.SECRET:
        options["required"] = item.required and not has_stored_secret
        return forms.CharField(widget=forms.PasswordInput(render_value=True), **options)
    if item.multiple and kind is not DynamicFormItemType.SELECT:
        return LinesField(**options)
    if kind is DynamicFormItemType.TEXT:
        return forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), **options)
    if kind is DynamicFormItemType.INTEGER:
        return forms.IntegerField(**options)
    if kind is DynamicFormItemType.NUMBER:
        return forms.FloatField(**options)
    if kind is DynamicFormItemType.BOOLEAN:
        # An unticked box is a valid `false`, never a missing value.
        return forms.BooleanField(**{**options, "required": False})
    if kind is DynamicFormItemType.SELECT:
        choices = [(option.name, _text(option.label) or option.name) for option in item.options]
        if item.multiple:
            return forms.MultipleChoiceField(choices=choices, **options)
        return forms.ChoiceField(choices=[("", "---------"), *choices], **options)
    if kind is DynamicFormItemType.JSON:
        return StorableJSONField(widget=forms.Textarea(attrs={"rows": 4}), **options)
    if kind is DynamicFormItemType.PROMPT_EDITOR:
        return PromptField(widget=forms.Textarea(attrs={"rows": 6}), **options)
    # string, model-selector, knowledge-base-selector
    return forms.CharField(**options)


def runner_choices(current: str | None) -> list[tuple[str, str]]:
    choices = [("", "---------")]
    for descriptor in RunnerDescriptor.objects.exclude(status=RunnerDescriptor.Status.MISSING).order_by("runner_id"):
        choices.append((descriptor.runner_id, f"{descriptor.label_text()} — {descriptor.runner_id}"))
    if current and current not in {value for value, _ in choices}:
        choices.append((current, f"{current} (not available)"))
    return choices


def runner_config_items(runner_id: str | None) -> list[DynamicFormItemSchema]:
    if not runner_id:
        return []
    descriptor = RunnerDescriptor.objects.filter(runner_id=runner_id).first()
    if descriptor is None or descriptor.status == RunnerDescriptor.Status.MISSING:
        return []
    return config_schema_items(descriptor.config_schema)


class EventTypesField(forms.CharField):
    def to_python(self, value: Any) -> Any:
        text = super().to_python(value) or ""
        return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value


class AgentBindingAdminForm(forms.ModelForm[AgentBinding]):
    """Base form; `binding_admin_form()` derives the class for one runner."""

    config_items: ClassVar[list[DynamicFormItemSchema]] = []
    user: ClassVar[AbstractBaseUser | AnonymousUser | None] = None

    binding_id = forms.SlugField(required=False, max_length=64, help_text="Leave empty to generate one from the name.")
    event_types = EventTypesField(
        initial="message.received", help_text="Comma-separated, e.g. `message.received`; `*` matches every event."
    )
    runner_id = forms.ChoiceField(label="Runner", choices=[])
    resource_policy = StorableJSONField(required=False, widget=forms.Textarea(attrs={"rows": 4}))
    state_policy = StorableJSONField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    delivery_policy = StorableJSONField(required=False, widget=forms.Textarea(attrs={"rows": 3}))

    class Meta:
        model = AgentBinding
        fields = [
            "binding_id",
            "name",
            "workspace",
            "scope_type",
            "scope_id",
            "event_types",
            "runner_id",
            "resource_policy",
            "state_policy",
            "delivery_policy",
            "concurrency_policy",
            "timeout_seconds",
            "priority",
            "enabled",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prepared: dict[str, Any] = {}
        instance: AgentBinding = self.instance
        stored = instance.runner_id if instance.pk else None
        runner_field = self.fields["runner_id"]
        assert isinstance(runner_field, forms.ChoiceField)
        runner_field.choices = runner_choices(stored)
        runner_field.help_text = "Changing the runner reloads the page with that runner's config fields."
        runner_field.widget.attrs["onchange"] = "window.location.search='?runner_id='+encodeURIComponent(this.value)"
        self.fields[
            "scope_id"
        ].help_text = "bot_id for bot scope; empty for workspace scope (its own workspace) and global scope."
        self.fields["workspace"].required = not self._user_is_superuser
        self.fields["workspace"].help_text = "Empty only for host-wide global bindings (superusers)."
        if instance.pk:
            self.fields["binding_id"].disabled = True
        for policy, model in (
            ("resource_policy", ResourcePolicy),
            ("state_policy", StatePolicy),
            ("delivery_policy", DeliveryPolicy),
        ):
            stored_policy = getattr(instance, policy) if instance.pk else {}
            self.initial[policy] = model.model_validate(stored_policy or {}).model_dump(mode="json")
        masked = binding_runner_config_masked(instance) if instance.pk else {}
        for item in self.config_items:
            name = CONFIG_FIELD_PREFIX + item.name
            if instance.pk and item.name in masked:
                self.initial[name] = masked[item.name]
            elif item.default is not None:
                self.initial.setdefault(name, item.default)
        workspace_field = self.fields["workspace"]
        if isinstance(workspace_field, forms.ModelChoiceField) and not self._user_is_superuser:
            workspace_field.queryset = Workspace.objects.filter(
                memberships__user_id=getattr(self.user, "pk", None) or 0
            )

    @property
    def _user_is_superuser(self) -> bool:
        return bool(getattr(self.user, "is_superuser", False))

    def _config_from_fields(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        for item in self.config_items:
            value = self.cleaned_data.get(CONFIG_FIELD_PREFIX + item.name)
            if value is None or value == "" or value == []:
                continue
            config[item.name] = value
        return config

    def _error_field(self, key: str) -> str | None:
        """The form field an error key (`runner_config.x`, `scope.scope_id`, `resource_policy.y`) belongs to."""
        parts = key.split(".")
        if parts[0] == "runner_config":
            target = CONFIG_FIELD_PREFIX + parts[1] if len(parts) > 1 else ""
        elif parts[0] == "scope":
            target = parts[1] if len(parts) > 1 else "scope_type"
        else:
            target = parts[0]
        return target if target in self.fields and not self.fields[target].disabled else None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        instance: AgentBinding = self.instance
        workspace = cleaned.get("workspace")
        body = {
            "binding_id": (instance.binding_id if instance.pk else cleaned.get("binding_id")) or None,
            "name": cleaned.get("name") or "",
            "scope": {"scope_type": cleaned.get("scope_type"), "scope_id": cleaned.get("scope_id") or None},
            "event_types": cleaned.get("event_types") or [],
            "runner_id": cleaned.get("runner_id"),
            "runner_config": self._config_from_fields(),
            "concurrency_policy": cleaned.get("concurrency_policy"),
            "timeout_seconds": cleaned.get("timeout_seconds"),
            "priority": cleaned.get("priority"),
            "enabled": cleaned.get("enabled"),
        }
        for policy in ("resource_policy", "state_policy", "delivery_policy"):
            if cleaned.get(policy) not in (None, ""):
                body[policy] = cleaned[policy]
        try:
            spec = BindingIn.model_validate(body)
            self.prepared = binding_prepare(workspace=workspace, spec=spec, existing=instance if instance.pk else None)
        except ValidationError as exc:
            self._add_field_errors(field_errors(exc))
        except BindingValidationError as exc:
            self._add_field_errors(exc.fields)
        return cleaned

    def _add_field_errors(self, fields: dict[str, str]) -> None:
        for key, message in fields.items():
            target = self._error_field(key)
            self.add_error(target, message if target else f"{key}: {message}")

    def _post_clean(self) -> None:
        # Model validation is `binding_prepare`'s job (run in clean); the admin saves `self.prepared`.
        return


def binding_admin_form(
    *, runner_id: str | None, user: AbstractBaseUser | AnonymousUser | None, instance: AgentBinding | None = None
) -> type[AgentBindingAdminForm]:
    """The admin form class for a binding of `runner_id`, with one field per config schema item."""
    items = runner_config_items(runner_id)
    stored_secrets = (instance.runner_secrets or {}) if instance is not None and instance.pk else {}
    attrs: dict[str, Any] = {"config_items": items, "user": user, "__module__": __name__}
    for item in items:
        attrs[CONFIG_FIELD_PREFIX + item.name] = config_form_field(item, has_stored_secret=item.name in stored_secrets)
    return type("AgentBindingRunnerForm", (AgentBindingAdminForm,), attrs)


class BotAdminForm(forms.ModelForm[Bot]):
    credentials_input = StorableJSONField(
        label="Credentials",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text=f"A JSON object. Stored values show as {SECRET_MASK}; leave them so to keep them. "
        "A key removed here is deleted.",
    )

    class Meta:
        model = Bot
        fields = ["workspace", "bot_id", "name", "platform", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.credentials: dict[str, Any] = {}
        if self.instance.pk:
            self.initial["credentials_input"] = bot_credentials_masked(self.instance)

    def clean_credentials_input(self) -> Any:
        value = self.cleaned_data.get("credentials_input")
        if value in (None, ""):
            value = {}
        if not isinstance(value, dict):
            raise forms.ValidationError("Must be a JSON object.")
        stored = (self.instance.credentials or {}) if self.instance.pk else {}
        try:
            self.credentials = credentials_merge(given=value, stored=stored)
        except BindingValidationError as exc:
            raise forms.ValidationError(list(exc.fields.values())) from None
        return value
