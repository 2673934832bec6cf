"""Admin forms for bots and bindings.

A binding's runner config is edited through real form fields, one per item of the selected runner's
config schema (named `cfg__<item>`). The admin builds the form class for one runner at a time: the runner
comes from the posted data, `?runner_id=` or the stored binding, and changing the runner select reloads
the page with `?runner_id=`. Validation is `bindings.services.binding_prepare`, the same as the API's;
its field errors are shown on the matching form fields. Secrets are shown as the mask, and a mask that
comes back keeps the stored secret.

Model and knowledge-base selectors of the config, and the policies' model, tool and knowledge-base lists,
are selects of the workspace's real resources, listed through `bindings.resource_catalog` (filled by
`resources`; without it they are free text). The workspace is the one posted, the one of `?workspace=`
(picking a workspace on the add page reloads it so) or the binding's; while none is chosen the selects
list every workspace the user may pick, grouped by workspace. A stored id that no longer exists stays
listed as "(missing)" so that saving keeps it. The policies are edited as one control per key and put
back together as the JSON the API takes; stored keys no control covers show in the policy's "other keys"
JSON and are saved as they are.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any, ClassVar

from django import forms
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.forms.fields import InvalidJSONInput
from django.utils.functional import lazy
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import capfirst, format_lazy
from django.utils.translation import get_language, gettext
from django.utils.translation import gettext_lazy as _
from pydantic import ValidationError

from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from bindings.origins import OriginsRefusedError, allowed_origins_normalized
from bindings.policies import (
    MERGE_WINDOW_DEFAULT,
    WILDCARD,
    DeliveryPolicy,
    GroupReply,
    NonTextInput,
    ResourcePolicy,
    StatePolicy,
)
from bindings.resource_catalog import CatalogEntry, ResourceKind, resource_catalog_source
from bindings.runner_config import config_schema_items
from bindings.selectors import (
    binding_runner_config_masked,
    bot_credentials_masked,
    runner_descriptors_visible,
    workspaces_of_member,
)
from bindings.services import (
    BindingValidationError,
    BotCredentialSpec,
    binding_prepare,
    bot_api_base_url_check,
    bot_credential_schemas,
    bot_credentials_check,
    credentials_merge,
)
from bindings.specs import BindingIn
from bindings.triggers import TriggerPolicy
from foundation.api_errors import field_errors
from foundation.crypto import SECRET_MASK
from foundation.outbound import URLRefusedError
from foundation.storable import UNSTORABLE_MESSAGE, is_storable, unstorable_text_path
from langbot_sdk.protocol.manifest import DynamicFormItemSchema, DynamicFormItemType
from langbot_sdk.protocol.state import StateScope, StorageArea

CONFIG_FIELD_PREFIX = "cfg__"
# Config items LangBot's own runner has that the host keeps only so that an imported pipeline loses
# nothing: the form shows them, in a collapsed "Imported from LangBot" group, only when they hold a value.
LANGBOT_KEPT_ITEMS = frozenset({"knowledge-base", "model-reasoning", "box-session-id-template"})
# A multiple model selector of these names lists the models tried after the primary one (`model`): the
# primary is not offered in it and may not be picked.
FALLBACK_MODEL_ITEMS = frozenset({"fallback-models", "fallback_models"})
PRIMARY_MODEL_ITEM = "model"
# While no workspace is chosen, the resource selects list the resources of at most this many workspaces.
CATALOG_GROUPED_WORKSPACES_MAX = 20


def manifest_locale() -> str:
    """The manifest locale (`en_US`, `zh_Hans`) of the language the admin is shown in."""
    language = (get_language() or "en").lower()
    return "zh_Hans" if language.startswith("zh") else "en_US"


def _text(value: Any) -> str:
    if value is None:
        return ""
    root = getattr(value, "root", value)
    if isinstance(root, dict):
        return str(root.get(manifest_locale()) or root.get("en_US") or next(iter(root.values()), ""))
    return str(root)


_INLINE_CODE = re.compile(r"`([^`\n]+)`")


def inline_code_html(text: str) -> SafeString:
    """Help text as HTML: escaped (a plugin's manifest is not trusted markup), with its Markdown
    `code spans` shown as code instead of literal backticks."""
    return mark_safe(_INLINE_CODE.sub(r"<code>\1</code>", escape(text)))


def _json_text(value: Any, **options: Any) -> str:
    """JSON to show in a field again; escaped to ASCII when it holds a lone surrogate, which a page
    cannot carry."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return text if is_storable(text) else json.dumps(value, **options)


def _or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _refuse_unstorable(value: Any) -> None:
    # A form field's text cannot hold NUL (Django refuses it), but JSON escapes can.
    if unstorable_text_path(value) is not None:
        raise forms.ValidationError(gettext(UNSTORABLE_MESSAGE))


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
                raise forms.ValidationError(
                    gettext("%(label)s: not valid JSON; write plain text or a JSON list of messages.")
                    % {"label": self.label}
                ) from None
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


class RateLimitField(forms.CharField):
    """A rate limit (`bindings.policies.RateLimit`) written as `messages/seconds`, `5/60`; empty for none."""

    _FORM = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*(?:s|seconds?)?\s*")

    def to_python(self, value: Any) -> Any:
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        match = self._FORM.fullmatch(text)
        if match is None:
            raise forms.ValidationError(gettext("Write it as messages/seconds, like 5/60."), code="invalid")
        # Bounds are the policy's (checked with the rest of it), so the form and the API say the same.
        return {"messages": int(match.group(1)), "seconds": int(match.group(2))}

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return f"{value.get('messages')}/{value.get('seconds')}"
        return value


class SecretInput(forms.PasswordInput):
    """A password input that shows the mask for a stored secret and never a secret itself.

    A refused form is shown again with what was posted; a secret typed into it is not echoed back into the
    page (it must be typed again), and while a secret is stored its field shows the mask, which keeps it.
    """

    def __init__(self, *, has_stored_secret: bool = False, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs={"autocomplete": "new-password", **(attrs or {})}, render_value=True)
        self.has_stored_secret = has_stored_secret

    def format_value(self, value: Any) -> str | None:
        return SECRET_MASK if value == SECRET_MASK or self.has_stored_secret else None


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
        return forms.CharField(widget=SecretInput(has_stored_secret=has_stored_secret), **options)
    if item.multiple and kind is not DynamicFormItemType.SELECT:
        return LinesField(**options)
    if kind is DynamicFormItemType.TEXT:
        return forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), **options)
    if kind is DynamicFormItemType.INTEGER:
        low = None if item.minimum is None else math.ceil(item.minimum)
        high = None if item.maximum is None else math.floor(item.maximum)
        return forms.IntegerField(**options, min_value=low, max_value=high)
    if kind is DynamicFormItemType.NUMBER:
        return forms.FloatField(**options, min_value=item.minimum, max_value=item.maximum)
    if kind is DynamicFormItemType.BOOLEAN:
        # An unticked box is a valid `false`, never a missing value.
        return forms.BooleanField(**{**options, "required": False})
    if kind is DynamicFormItemType.SELECT:
        choices = [(option.name, _text(option.label) or option.name) for option in item.options]
        if item.multiple:
            return forms.MultipleChoiceField(choices=choices, **options)
        return forms.ChoiceField(choices=[("", "---------"), *choices], **options)
    if kind is DynamicFormItemType.JSON:
        invalid = f"{options['label']}: enter valid JSON."
        return StorableJSONField(
            widget=forms.Textarea(attrs={"rows": 4}), error_messages={"invalid": invalid}, **options
        )
    if kind is DynamicFormItemType.PROMPT_EDITOR:
        return PromptField(widget=forms.Textarea(attrs={"rows": 6}), **options)
    # string, model-selector, knowledge-base-selector
    return forms.CharField(**options)


def runner_choices(current: str | None, *, workspaces: Iterable[Workspace] = ()) -> list[tuple[str, str]]:
    """The runners a binding may use: every installed one, and the development runners of `workspaces`."""
    choices = [("", "---------")]
    visible = runner_descriptors_visible(workspace_ids=[w.pk for w in workspaces]).select_related("workspace")
    for descriptor in visible.exclude(status=RunnerDescriptor.Status.MISSING).order_by("runner_id"):
        label = f"{descriptor.label_text(manifest_locale())} — {descriptor.runner_id}"
        if descriptor.workspace is not None:
            label += f" (development, {descriptor.workspace.slug})"
        choices.append((descriptor.runner_id, label))
    if current and current not in {value for value, _ in choices}:
        choices.append((current, f"{current} (not available)"))
    return choices


def _runner_descriptor(runner_id: str | None) -> RunnerDescriptor | None:
    if not runner_id:
        return None
    descriptor = RunnerDescriptor.objects.filter(runner_id=runner_id).first()
    if descriptor is None or descriptor.status == RunnerDescriptor.Status.MISSING:
        return None
    return descriptor


def _runner_platform_actions(descriptor: RunnerDescriptor | None) -> list[str]:
    """The platform actions the runner's manifest may request: all a policy can usefully allow."""
    actions = (descriptor.permissions or {}).get("platform_api", []) if descriptor is not None else []
    return [action for action in actions if isinstance(action, str)] if isinstance(actions, list) else []


# --- policies as controls ------------------------------------------------------------------------------

POLICY_MODELS: dict[str, type[ResourcePolicy] | type[StatePolicy] | type[DeliveryPolicy] | type[TriggerPolicy]] = {
    "resource_policy": ResourcePolicy,
    "state_policy": StatePolicy,
    "delivery_policy": DeliveryPolicy,
    "trigger_policy": TriggerPolicy,
}
POLICY_OTHER_KEYS = "other"
"""The control of a policy holding the stored keys no other control covers, as JSON."""

# The keys each policy edits with a control of its own; anything else stored goes to the "other" JSON.
POLICY_CONTROLLED_KEYS: dict[str, tuple[str, ...]] = {
    "resource_policy": (
        "allowed_model_ids",
        "allowed_tool_names",
        "allowed_kb_ids",
        "storage_areas",
        "platform_actions",
        "require_action_approval",
        "history_conversations",
        "history_same_actor",
    ),
    "state_policy": ("enable_state", "state_scopes"),
    "delivery_policy": ("enable_streaming", "enable_reply", "max_message_size", "non_text_input", "group_reply"),
    "trigger_policy": (
        "chat_types",
        "group_always",
        "group_mention",
        "group_prefixes",
        "group_patterns",
        "strip_prefix",
        "ignore_prefixes",
        "ignore_patterns",
        "access_mode",
        "access_group_chat_ids",
        "access_private_user_ids",
        "access_user_ids",
        "rate_limit_per_user",
        "rate_limit_per_chat",
        "rate_limit_reply",
    ),
}

# Policy lists of resource ids: (key, resource kind, what one is called in a message).
POLICY_RESOURCE_LISTS: tuple[tuple[str, ResourceKind, str], ...] = (
    ("allowed_model_ids", ResourceKind.MODELS, "model"),
    ("allowed_tool_names", ResourceKind.TOOLS, "tool"),
    ("allowed_kb_ids", ResourceKind.KNOWLEDGE_BASES, "knowledge base"),
)


def policy_field_name(policy: str, key: str) -> str:
    return f"{policy}__{key}"


def policy_field_names(policy: str) -> list[str]:
    """The form fields of one policy, in the order the admin shows them."""
    return [policy_field_name(policy, key) for key in (*POLICY_CONTROLLED_KEYS[policy], POLICY_OTHER_KEYS)]


def _other_keys_field() -> StorableJSONField:
    return StorableJSONField(
        label=_("Other keys"),
        required=False,
        help_text=_(
            "Stored keys of this policy that have no control above, kept as they are (a JSON object). "
            "A key the policy does not know is refused on save: remove it here."
        ),
    )


# The protocol's state scopes and storage areas by name in the page's language; the value itself beside it
# where the two differ (it is what runners and docs say).
_SCOPE_AND_AREA_NAMES = {
    "conversation": _("conversation"),
    "actor": _("actor"),
    "subject": _("subject"),
    "runner": _("runner"),
    "binding": _("binding"),
    "person": _("person"),
    "plugin": _("Plugin"),
    "workspace": _("workspace"),
}


def _scope_or_area_label(value: str) -> str:
    name = str(_SCOPE_AND_AREA_NAMES.get(value, value))
    return value if name.casefold() == value.casefold() else f"{name} ({value})"


def _enum_choices(enum: type[StorageArea] | type[StateScope]) -> list[Any]:
    return [(member.value, lazy(_scope_or_area_label, str)(member.value)) for member in enum]


def _wildcard_first(choices: list[Any]) -> list[Any]:
    return [(WILDCARD, f"all ({WILDCARD})"), *choices]


def _with_stored(choices: list[Any], stored: Any, *, suffix: str) -> list[Any]:
    """`choices` plus the stored values they lack, labelled with `suffix`, so that they stay visible and
    saving the form unchanged keeps them."""
    values = stored if isinstance(stored, list) else [stored]
    offered = {value for value, _ in _flat_choices(choices)}
    extra = [value for value in values if isinstance(value, str) and value and value not in offered]
    return [*choices, *((value, f"{value} {suffix}") for value in dict.fromkeys(extra))]


def _flat_choices(choices: list[Any]) -> list[tuple[str, str]]:
    flat: list[tuple[str, str]] = []
    for value, label in choices:
        if isinstance(label, (list, tuple)):
            flat.extend(label)
        else:
            flat.append((value, label))
    return flat


class EventTypesField(forms.CharField):
    def to_python(self, value: Any) -> Any:
        text = super().to_python(value) or ""
        return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value


class AgentBindingAdminForm(forms.ModelForm[AgentBinding]):
    """Base form; `binding_admin_form()` derives the class for one runner."""

    config_items: ClassVar[list[DynamicFormItemSchema]] = []
    runner_platform_actions: ClassVar[list[str]] = []

    class Media:
        js = ["bindings/binding_form.js"]

    user: ClassVar[AbstractBaseUser | AnonymousUser | None] = None

    # Declared fields take no label from the model: named here, in the page's language.
    binding_id = forms.SlugField(
        label=capfirst(_("binding id")),
        required=False,
        max_length=64,
        help_text=_("Leave empty to generate one from the name."),
    )
    event_types = EventTypesField(
        label=capfirst(_("event types")),
        initial="message.received",
        help_text=_("Comma-separated, e.g. `message.received`; `*` matches every event."),
    )
    runner_id = forms.ChoiceField(label=_("Runner"), choices=[])

    # Resource policy. The three id lists are selects of the workspace's resources, or free text without a
    # catalog (set up in __init__).
    resource_policy__allowed_model_ids = forms.MultipleChoiceField(label=_("Allowed models"), required=False)
    resource_policy__allowed_tool_names = forms.MultipleChoiceField(label=_("Allowed tools"), required=False)
    resource_policy__allowed_kb_ids = forms.MultipleChoiceField(label=_("Allowed knowledge bases"), required=False)
    resource_policy__storage_areas = forms.MultipleChoiceField(
        label=_("Storage areas"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        choices=_enum_choices(StorageArea),
        help_text=_("`plugin` and `binding` are private to the runner; `workspace` is shared by every binding."),
    )
    resource_policy__platform_actions = forms.MultipleChoiceField(
        label=_("Platform actions"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("The actions the runner's manifest may request; the policy allows a subset."),
    )
    resource_policy__require_action_approval = forms.BooleanField(
        label=_("Require action approval"),
        required=False,
        help_text=_("Platform actions wait for an operator's approval."),
    )
    resource_policy__history_conversations = LinesField(
        label=_("History of other conversations"),
        required=False,
        help_text=format_lazy(
            _(
                "Conversation ids of this workspace whose history runs may also read, one per line; "
                "`{wildcard}` any of them. Empty: only the run's own conversation."
            ),
            wildcard=WILDCARD,
        ),
    )
    resource_policy__history_same_actor = forms.BooleanField(
        label=_("History of the sender's conversations"),
        required=False,
        help_text=_("Runs may also read the conversations of this workspace the sender wrote in through the same bot."),
    )
    resource_policy__other = _other_keys_field()
    # State policy.
    state_policy__enable_state = forms.BooleanField(label=_("Enable state"), required=False)
    state_policy__state_scopes = forms.MultipleChoiceField(
        label=_("State scopes"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        choices=_enum_choices(StateScope),
    )
    state_policy__other = _other_keys_field()
    # Delivery policy.
    delivery_policy__enable_streaming = forms.BooleanField(label=_("Enable streaming"), required=False)
    delivery_policy__enable_reply = forms.BooleanField(
        label=_("Enable reply"),
        required=False,
        help_text=_("Unticked, the binding is an observer: it runs beside the replying binding and never replies."),
    )
    delivery_policy__max_message_size = forms.IntegerField(
        label=_("Max message size"),
        required=False,
        help_text=_("Longest reply (characters) delivered to the platform; empty leaves it to the platform."),
    )
    delivery_policy__non_text_input = forms.ChoiceField(
        label=_("Non-text input to a text-only runner"),
        choices=[
            (NonTextInput.NOTE.value, _("note: the runner reads a text note naming each image or file")),
            (NonTextInput.REFUSE.value, _("refuse: the message is refused (input.unsupported), nothing runs")),
        ],
        required=False,
        help_text=_("For a runner that declares it reads text only (multimodal_input: false)."),
    )
    delivery_policy__group_reply = forms.ChoiceField(
        label=_("Replies in groups"),
        choices=[
            (GroupReply.QUOTE.value, _("quote: reply to the sender's message (a thread on Slack)")),
            (GroupReply.PLAIN.value, _("plain: a message of its own in the chat")),
            (GroupReply.MENTION.value, _("mention: a message of its own that @-mentions the sender")),
        ],
        required=False,
        help_text=_(
            "How a reply in a group chat points at the message it answers; private chats are answered the same "
            "whatever this says. Where the platform cannot mention the sender, the reply quotes instead."
        ),
    )
    delivery_policy__other = _other_keys_field()
    # Trigger filter (bindings.triggers).
    trigger_policy__chat_types = forms.MultipleChoiceField(
        label=_("Chat types"),
        required=False,
        choices=[("private", _("private")), ("group", _("group"))],
        widget=forms.CheckboxSelectMultiple,
        help_text=_("The chats answered; an event naming no group chat type counts as private."),
    )
    trigger_policy__group_always = forms.BooleanField(
        label=_("Group: answer every message"),
        required=False,
        help_text=_(
            "Every group message is answered, addressed to the bot or not (the rules below then only say which "
            "prefix is removed). Private chats are always answered, unless the access lists say otherwise."
        ),
    )
    trigger_policy__group_mention = forms.BooleanField(
        label=_("Group: answer when addressed"),
        required=False,
        help_text=_("A group message that @-mentions, replies to or commands the bot is answered."),
    )
    trigger_policy__group_prefixes = LinesField(
        label=_("Group: answer prefixes"), required=False, help_text=_("One per line; a group message starting so.")
    )
    trigger_policy__group_patterns = LinesField(
        label=_("Group: answer patterns"),
        required=False,
        help_text=_("Regular expressions, one per line, matched at the start of a group message."),
    )
    trigger_policy__strip_prefix = forms.BooleanField(
        label=_("Strip the matched prefix"), required=False, help_text=_("The runner gets the text after it.")
    )
    trigger_policy__ignore_prefixes = LinesField(label=_("Ignore prefixes"), required=False)
    trigger_policy__ignore_patterns = LinesField(
        label=_("Ignore patterns"), required=False, help_text=_("Regular expressions, one per line, matched anywhere.")
    )
    trigger_policy__access_mode = forms.ChoiceField(
        label=_("Access lists"),
        choices=[("deny", _("deny the listed chats and senders")), ("allow", _("allow only the listed ones"))],
    )
    trigger_policy__access_group_chat_ids = LinesField(
        label=_("Group chats"), required=False, help_text=_("Chat ids, one per line; `*` lists every group chat.")
    )
    trigger_policy__access_private_user_ids = LinesField(
        label=_("Private chats"), required=False, help_text=_("User ids, one per line; `*` lists every private chat.")
    )
    trigger_policy__access_user_ids = LinesField(
        label=_("Senders"), required=False, help_text=_("User ids, one per line, listed in any chat.")
    )
    trigger_policy__rate_limit_per_user = RateLimitField(
        label=_("Rate limit per sender"),
        required=False,
        help_text=_(
            "At most this many messages of one sender answered per this many seconds, as messages/seconds "
            "(5/60); empty for no limit. Messages over it start no run."
        ),
    )
    trigger_policy__rate_limit_per_chat = RateLimitField(
        label=_("Rate limit per chat"),
        required=False,
        help_text=_("The same for all the senders of one chat together, as messages/seconds; empty for no limit."),
    )
    trigger_policy__rate_limit_reply = forms.CharField(
        label=_("Rate limit reply"),
        required=False,
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_(
            "Sent once per window to a sender or chat over its limit; empty for “You're sending messages too "
            "quickly; please wait a moment.” in the host's language."
        ),
    )
    trigger_policy__other = _other_keys_field()

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
            "concurrency_policy",
            "merge_window_seconds",
            "timeout_seconds",
            "priority",
            "enabled",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prepared: dict[str, Any] = {}
        self._catalog_cache: dict[tuple[ResourceKind, int], list[CatalogEntry]] = {}
        instance: AgentBinding = self.instance
        stored = instance.runner_id if instance.pk else None
        runner_field = self.fields["runner_id"]
        assert isinstance(runner_field, forms.ChoiceField)
        runner_field.help_text = gettext("Changing the runner reloads the page with that runner's config fields.")
        runner_field.widget.attrs["onchange"] = _reload_with("runner_id")
        self.fields["scope_id"].help_text = gettext(
            "bot_id for bot scope; empty for workspace scope (its own workspace) and global scope."
        )
        merge_window = self.fields["merge_window_seconds"]
        # Forms posted before the field existed leave it out: the default applies.
        merge_window.required = False
        merge_window.help_text = gettext(
            "Under `merge`: seconds of quiet after a message before the run starts; messages that arrive "
            "meanwhile join its input."
        )
        self.fields["workspace"].required = not self._user_is_superuser
        self.fields["workspace"].help_text = gettext("Empty only for host-wide global bindings (superusers).")
        if instance.pk:
            self.fields["binding_id"].disabled = True
        workspace_field = self.fields["workspace"]
        if isinstance(workspace_field, forms.ModelChoiceField) and not self._user_is_superuser:
            workspace_field.queryset = workspaces_of_member(user_id=getattr(self.user, "pk", None))
        self.catalog_workspaces, self.catalog_workspace = self._resolve_catalog_workspaces()
        runner_field.choices = runner_choices(stored, workspaces=self.catalog_workspaces)
        if not instance.pk:
            # The resource selects follow the workspace: picking one reloads the add page with it.
            # The admin wraps the select (add / change links); the handler belongs on the select itself.
            select = getattr(workspace_field.widget, "widget", workspace_field.widget)
            if isinstance(select, forms.Widget):
                select.attrs["onchange"] = _reload_with("workspace")
            if self.catalog_workspace is not None and not self.is_bound:
                self.initial.setdefault("workspace", self.catalog_workspace.pk)
        masked = binding_runner_config_masked(instance) if instance.pk else {}
        for item in self.config_items:
            name = CONFIG_FIELD_PREFIX + item.name
            if instance.pk and item.name in masked:
                self.initial[name] = masked[item.name]
            elif item.default is not None:
                self.initial.setdefault(name, item.default)
            # A stored value, or a default the schema names, stays offered even when no resource has it.
            self._catalog_config_field(item, stored=self.initial.get(name))
        self._langbot_kept_fields_drop(masked)
        self._fallback_models_set_up()
        self._policy_controls_set_up()
        self._runner_selection_help()
        for field in self.fields.values():
            if field.help_text and not isinstance(field.help_text, SafeString):
                field.help_text = inline_code_html(str(field.help_text))

    @property
    def _user_is_superuser(self) -> bool:
        return bool(getattr(self.user, "is_superuser", False))

    # --- the workspace whose resources are offered -------------------------------------------------

    def _resolve_catalog_workspaces(self) -> tuple[list[Workspace], Workspace | None]:
        """The workspaces whose resources the selects offer, and the one binding workspace when known.

        Known: posted, given as `?workspace=` (the add page's initial data) or the binding's. Otherwise
        every workspace the user may pick (their only one counts as chosen). Never a workspace the user
        may not pick: a foreign id posted by hand lists nothing of it.
        """
        user_id = getattr(self.user, "pk", None)
        allowed = Workspace.objects.all() if self._user_is_superuser else workspaces_of_member(user_id=user_id)
        raw = self.data.get(self.add_prefix("workspace")) if self.is_bound else self.initial.get("workspace")
        if raw is not None and str(raw).isdigit():
            chosen = allowed.filter(pk=int(raw)).first()
            if chosen is not None:
                return [chosen], chosen
        everything = list(allowed.order_by("slug")[: CATALOG_GROUPED_WORKSPACES_MAX + 1])
        if len(everything) == 1 and not self.is_bound and not self._user_is_superuser:
            return everything, everything[0]
        return everything[:CATALOG_GROUPED_WORKSPACES_MAX], None

    def _catalog_entries(self, kind: ResourceKind, workspace: Workspace) -> list[CatalogEntry]:
        key = (kind, workspace.pk)
        if key not in self._catalog_cache:
            source = resource_catalog_source(kind)
            self._catalog_cache[key] = source(workspace) if source is not None else []
        return self._catalog_cache[key]

    def _resource_choices(self, kind: ResourceKind, *, model_kind: str | None = None) -> list[Any]:
        """The workspace's resources of `kind` as choices: flat for one workspace, grouped by workspace
        while none is chosen."""

        def entries(workspace: Workspace) -> list[tuple[str, str]]:
            return [
                (entry.id, entry.label)
                for entry in self._catalog_entries(kind, workspace)
                if model_kind is None or entry.model_kind == model_kind
            ]

        if self.catalog_workspace is not None:
            return entries(self.catalog_workspace)
        groups = [(f"workspace {workspace.slug}", entries(workspace)) for workspace in self.catalog_workspaces]
        return [group for group in groups if group[1]]

    def _unknown_id_message(self, label: str, noun: str) -> str:
        # `%(value)s` stays for Django to fill with the refused id.
        if self.catalog_workspace is not None:
            where = gettext("workspace %(slug)s") % {"slug": self.catalog_workspace.slug}
        else:
            where = gettext("your workspaces")
        return gettext("{label}: there is no {noun} %(value)s in {where}.").format(label=label, noun=noun, where=where)

    def _catalog_help(self) -> str:
        if self.catalog_workspace is not None:
            return ""
        more = len(self.catalog_workspaces) >= CATALOG_GROUPED_WORKSPACES_MAX
        if more:
            return " " + gettext(
                "Choose the workspace first to list only its resources (only the first %(count)d workspaces are "
                "listed)."
            ) % {"count": CATALOG_GROUPED_WORKSPACES_MAX}
        return " " + gettext("Choose the workspace first to list only its resources.")

    def _catalog_config_field(self, item: DynamicFormItemSchema, *, stored: Any) -> None:
        """A model or knowledge-base selector of the runner config as a select of the workspace's ones."""
        if item.type is DynamicFormItemType.MODEL_SELECTOR:
            noun = gettext("%(kind)s model") % {"kind": item.model_kind} if item.model_kind else gettext("model")
            kind = ResourceKind.MODELS
        elif item.type is DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR:
            kind, noun = ResourceKind.KNOWLEDGE_BASES, gettext("knowledge base")
        else:
            return
        if resource_catalog_source(kind) is None:
            return
        name = CONFIG_FIELD_PREFIX + item.name
        free_text = self.fields[name]
        choices = _with_stored(
            self._resource_choices(kind, model_kind=item.model_kind), stored, suffix=gettext("(missing)")
        )
        options: dict[str, Any] = {
            "label": free_text.label,
            "help_text": (free_text.help_text + self._catalog_help()).strip(),
            "required": free_text.required,
            "error_messages": {"invalid_choice": self._unknown_id_message(str(free_text.label), noun)},
        }
        if item.multiple:
            self.fields[name] = forms.MultipleChoiceField(
                choices=choices, widget=forms.SelectMultiple(attrs={"size": 6}), **options
            )
        else:
            self.fields[name] = forms.ChoiceField(choices=[("", "---------"), *choices], **options)

    # --- imported fields, fallbacks, the runner's selections ----------------------------------------

    def langbot_kept_field_names(self) -> list[str]:
        """The LangBot-only config fields still on the form (they hold a value)."""
        return [
            CONFIG_FIELD_PREFIX + item.name
            for item in self.config_items
            if item.name in LANGBOT_KEPT_ITEMS and CONFIG_FIELD_PREFIX + item.name in self.fields
        ]

    def _langbot_kept_fields_drop(self, stored: dict[str, Any]) -> None:
        """A LangBot-only item that holds nothing (unset, empty or its default) is not shown: it does
        nothing on this host, and a new binding never needs it."""
        for item in self.config_items:
            name = CONFIG_FIELD_PREFIX + item.name
            if item.name not in LANGBOT_KEPT_ITEMS:
                continue
            value = self.data.get(self.add_prefix(name)) if self.is_bound else stored.get(item.name)
            if value in (None, "", [], {}, "{}", "[]") or value == item.default:
                del self.fields[name]

    def _fallback_items(self) -> tuple[DynamicFormItemSchema | None, DynamicFormItemSchema | None]:
        by_name = {item.name: item for item in self.config_items}
        fallback = next((by_name[n] for n in FALLBACK_MODEL_ITEMS if n in by_name), None)
        primary = by_name.get(PRIMARY_MODEL_ITEM)
        if fallback is None or primary is None or not fallback.multiple:
            return None, None
        return primary, fallback

    def _fallback_models_set_up(self) -> None:
        """The primary model is not offered among its own fallbacks (the page's script keeps the two in
        step while the primary is changed; `clean` refuses it whatever was posted)."""
        primary, fallback = self._fallback_items()
        if primary is None or fallback is None:
            return
        field = self.fields.get(CONFIG_FIELD_PREFIX + fallback.name)
        if field is None:
            return
        field.widget.attrs["data-fallback-of"] = "id_" + CONFIG_FIELD_PREFIX + primary.name
        current = (
            self.data.get(self.add_prefix(CONFIG_FIELD_PREFIX + primary.name))
            if self.is_bound
            else self.initial.get(CONFIG_FIELD_PREFIX + primary.name)
        )
        if current and isinstance(field, forms.ChoiceField) and not self.is_bound:
            offered: list[Any] = list(field.choices)  # type: ignore[arg-type]  # set as a list above
            field.choices = [
                (value, label)
                if not isinstance(label, (list, tuple))
                else (value, [c for c in label if c[0] != current])
                for value, label in offered
                if value != current
            ]

    def _runner_selection_help(self) -> None:
        """Under each allowed-resources list, what the runner's own config picks of that kind."""
        picks: dict[ResourceKind, list[str]] = {ResourceKind.MODELS: [], ResourceKind.KNOWLEDGE_BASES: []}
        for item in self.config_items:
            if item.type is DynamicFormItemType.MODEL_SELECTOR:
                kind = ResourceKind.MODELS
            elif item.type is DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR:
                kind = ResourceKind.KNOWLEDGE_BASES
            else:
                continue
            value = self.initial.get(CONFIG_FIELD_PREFIX + item.name)
            values = value if isinstance(value, list) else [value]
            picks[kind].extend(str(v) for v in values if v)
        for key, kind, _noun in POLICY_RESOURCE_LISTS:
            chosen = list(dict.fromkeys(picks.get(kind, [])))
            if not chosen:
                continue
            field = self.fields[policy_field_name("resource_policy", key)]
            line = gettext("The runner's config picks: %(ids)s.") % {"ids": ", ".join(chosen)}
            field.help_text = f"{line} {field.help_text}"

    # --- policies ----------------------------------------------------------------------------------

    def _stored_policy(self, policy: str) -> dict[str, Any]:
        instance: AgentBinding = self.instance
        stored = getattr(instance, policy) if instance.pk else None
        return stored if isinstance(stored, dict) else {}

    def _policy_controls_set_up(self) -> None:
        for policy, model in POLICY_MODELS.items():
            stored = self._stored_policy(policy)
            values = {**model().model_dump(mode="json"), **stored}
            for key in POLICY_CONTROLLED_KEYS[policy]:
                self.initial.setdefault(policy_field_name(policy, key), values.get(key))
            other = {key: value for key, value in stored.items() if key not in POLICY_CONTROLLED_KEYS[policy]}
            other_name = policy_field_name(policy, POLICY_OTHER_KEYS)
            self.initial[other_name] = other
            posted_other = self.data.get(self.add_prefix(other_name)) if self.is_bound else None
            if not other and posted_other in (None, "", "{}"):
                # Nothing to show: the usual case, since the controls cover every key the policy knows.
                self.fields[other_name].widget = forms.HiddenInput()
        resource = {**ResourcePolicy().model_dump(mode="json"), **self._stored_policy("resource_policy")}
        for key, kind, noun in POLICY_RESOURCE_LISTS:
            name = policy_field_name("resource_policy", key)
            field = self.fields[name]
            if resource_catalog_source(kind) is None:
                self.fields[name] = LinesField(
                    label=field.label,
                    required=False,
                    help_text=gettext("One id per line; `%(wildcard)s` allows every one.") % {"wildcard": WILDCARD},
                )
                continue
            assert isinstance(field, forms.MultipleChoiceField)
            field.widget = forms.CheckboxSelectMultiple()
            field.choices = _with_stored(
                _wildcard_first(self._resource_choices(kind)), resource.get(key), suffix=gettext("(missing)")
            )
            field.error_messages["invalid_choice"] = self._unknown_id_message(str(field.label), noun)
            field.help_text = (
                gettext(
                    "None selected allows none; `%(wildcard)s` allows every one of the workspace. A pick in the "
                    "runner's own field narrows it; a field left empty takes all this allows."
                )
                % {"wildcard": WILDCARD}
                + self._catalog_help()
            )
        actions = self.fields[policy_field_name("resource_policy", "platform_actions")]
        assert isinstance(actions, forms.MultipleChoiceField)
        actions.choices = _with_stored(
            _wildcard_first([(action, action) for action in self.runner_platform_actions]),
            resource.get("platform_actions"),
            suffix=gettext("(not requested by the runner)"),
        )
        areas = self.fields[policy_field_name("resource_policy", "storage_areas")]
        assert isinstance(areas, forms.MultipleChoiceField)
        areas.choices = _with_stored(
            _enum_choices(StorageArea), resource.get("storage_areas"), suffix=gettext("(unknown)")
        )
        state = {**StatePolicy().model_dump(mode="json"), **self._stored_policy("state_policy")}
        scopes = self.fields[policy_field_name("state_policy", "state_scopes")]
        assert isinstance(scopes, forms.MultipleChoiceField)
        scopes.choices = _with_stored(_enum_choices(StateScope), state.get("state_scopes"), suffix=gettext("(unknown)"))

    def _policy_from_fields(self, policy: str) -> dict[str, Any]:
        """One policy as the API takes it: the stored keys no control covers, then each control's value."""
        other = self.cleaned_data.get(policy_field_name(policy, POLICY_OTHER_KEYS))
        value: dict[str, Any] = dict(other) if isinstance(other, dict) else {}
        for key in POLICY_CONTROLLED_KEYS[policy]:
            value[key] = self.cleaned_data.get(policy_field_name(policy, key))
        return value

    def clean_delivery_policy__non_text_input(self) -> str:
        # A form posted before the control existed leaves it out: the default applies.
        return self.cleaned_data.get("delivery_policy__non_text_input") or NonTextInput.NOTE.value

    def clean_delivery_policy__group_reply(self) -> str:
        # A form posted before the control existed leaves it out: the default applies.
        return self.cleaned_data.get("delivery_policy__group_reply") or GroupReply.QUOTE.value

    def clean_resource_policy__other(self) -> Any:
        return self._clean_other("resource_policy")

    def clean_state_policy__other(self) -> Any:
        return self._clean_other("state_policy")

    def clean_delivery_policy__other(self) -> Any:
        return self._clean_other("delivery_policy")

    def clean_trigger_policy__other(self) -> Any:
        return self._clean_other("trigger_policy")

    def _clean_other(self, policy: str) -> dict[str, Any]:
        value = self.cleaned_data.get(policy_field_name(policy, POLICY_OTHER_KEYS))
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError(gettext("Must be a JSON object."))
        covered = sorted(set(value) & set(POLICY_CONTROLLED_KEYS[policy]))
        if covered:
            raise forms.ValidationError(
                gettext("Set %(keys)s with the control(s) above, not here.") % {"keys": ", ".join(covered)}
            )
        return value

    # --- validation ------------------------------------------------------------------------------

    def _config_from_fields(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        for item in self.config_items:
            value = self.cleaned_data.get(CONFIG_FIELD_PREFIX + item.name)
            if value is None or value == "" or value == []:
                continue
            config[item.name] = value
        return config

    def _error_field(self, key: str) -> str | None:
        """The form field an error key (`runner_config.x`, `scope.scope_id`, `resource_policy.y.0`)
        belongs to."""
        parts = key.split(".")
        if parts[0] == "runner_config":
            target = CONFIG_FIELD_PREFIX + parts[1] if len(parts) > 1 else ""
        elif parts[0] == "scope":
            target = parts[1] if len(parts) > 1 else "scope_type"
        elif parts[0] in POLICY_MODELS:
            control = policy_field_name(parts[0], parts[1]) if len(parts) > 1 else ""
            target = control if control in self.fields else policy_field_name(parts[0], POLICY_OTHER_KEYS)
        else:
            target = parts[0]
        return target if target in self.fields and not self.fields[target].disabled else None

    def _fallbacks_check(self, cleaned: dict[str, Any]) -> None:
        primary, fallback = self._fallback_items()
        if primary is None or fallback is None:
            return
        chosen = cleaned.get(CONFIG_FIELD_PREFIX + primary.name)
        fallbacks = cleaned.get(CONFIG_FIELD_PREFIX + fallback.name) or []
        if chosen and chosen in fallbacks:
            self.add_error(
                CONFIG_FIELD_PREFIX + fallback.name,
                gettext("%(model)s is the primary model; it cannot be its own fallback.") % {"model": chosen},
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        self._fallbacks_check(cleaned)
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
            **{policy: self._policy_from_fields(policy) for policy in POLICY_MODELS},
            "concurrency_policy": cleaned.get("concurrency_policy"),
            "merge_window_seconds": _or_default(cleaned.get("merge_window_seconds"), MERGE_WINDOW_DEFAULT),
            "timeout_seconds": cleaned.get("timeout_seconds"),
            "priority": cleaned.get("priority"),
            "enabled": cleaned.get("enabled"),
        }
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
            # Policy errors keep naming their key, as the API's do.
            named = target is None or key.split(".")[0] in POLICY_MODELS
            self.add_error(target, f"{key}: {message}" if named else message)

    def _post_clean(self) -> None:
        # Model validation is `binding_prepare`'s job (run in clean); the admin saves `self.prepared`.
        return


def _reload_with(parameter: str) -> str:
    """An onchange handler reloading the page with this select's value as `?<parameter>=`, other query
    parameters (the runner, the workspace) kept. The admin's related-widget script fires `change` on every
    wrapped select as the page loads: the option the page came with selected reloads nothing (it reloaded
    the add page without end)."""
    return (
        "if(this.selectedIndex<0||this.options[this.selectedIndex].defaultSelected)return;"
        "var q=new URLSearchParams(window.location.search);"
        f"q.set('{parameter}',this.value);window.location.search=q.toString()"
    )


def binding_admin_form(
    *, runner_id: str | None, user: AbstractBaseUser | AnonymousUser | None, instance: AgentBinding | None = None
) -> type[AgentBindingAdminForm]:
    """The admin form class for a binding of `runner_id`, with one field per config schema item."""
    descriptor = _runner_descriptor(runner_id)
    items = config_schema_items(descriptor.config_schema) if descriptor is not None else []
    stored_secrets = (instance.runner_secrets or {}) if instance is not None and instance.pk else {}
    attrs: dict[str, Any] = {
        "config_items": items,
        "runner_platform_actions": _runner_platform_actions(descriptor),
        "user": user,
        "__module__": __name__,
    }
    for item in items:
        attrs[CONFIG_FIELD_PREFIX + item.name] = config_form_field(item, has_stored_secret=item.name in stored_secrets)
    return type("AgentBindingRunnerForm", (AgentBindingAdminForm,), attrs)


CREDENTIAL_FIELD_PREFIX = "cred__"


def credential_field_name(platform: str, name: str) -> str:
    """The bot form's field of one credential of one platform (every platform's are on the page; the
    platform select shows only its own)."""
    return f"{CREDENTIAL_FIELD_PREFIX}{platform}__{name}"


class StoredSecretInput(forms.PasswordInput):
    """A secret credential: never rendered back; while one is stored the empty box says so, and leaving it
    empty keeps it."""

    def __init__(self, *, stored: bool, attrs: dict[str, Any] | None = None) -> None:
        attrs = {"autocomplete": "new-password", **(attrs or {})}
        if stored:
            attrs["placeholder"] = gettext("stored — leave empty to keep")
        super().__init__(attrs=attrs, render_value=False)


def _credential_help(spec: BotCredentialSpec) -> SafeString:
    """The credential's help with a link to where the platform issues it (the platform's words, escaped)."""
    text = str(escape(spec.help))
    if spec.link:
        where = escape(gettext("where to get it"))
        text = f'{text} <a href="{escape(spec.link)}" target="_blank" rel="noopener noreferrer">{where}</a>'
    return mark_safe(text)


class BotAdminForm(forms.ModelForm[Bot]):
    """A bot: one field per credential its platform's adapter declares (switched with the platform select
    by `bindings/bot_credentials.js`); platforms that declare none (the web UI, the API) keep a JSON
    object of credentials. Saving checks the platform's schema (required, formats), as the API does."""

    credentials_input = StorableJSONField(
        label=_("Credentials"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "data-credential-platform": ""}),
        help_text=format_lazy(
            _(
                "A JSON object, for a platform without credential fields. Stored values show as {mask}; leave "
                "them so to keep them. A key removed here is deleted."
            ),
            mask=SECRET_MASK,
        ),
    )

    allowed_origins = forms.CharField(
        label=_("Allowed origins"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "https://www.example.com"}),
        help_text=_(
            "Web bots only: the websites (scheme://host[:port], one a line) whose pages may embed this bot's chat "
            "widget. None: the widget is off."
        ),
    )

    class Meta:
        model = Bot
        fields = ["workspace", "bot_id", "name", "platform", "enabled", "allowed_origins"]

    class Media:
        js = ["bindings/bot_credentials.js"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.credentials: dict[str, Any] = {}
        schemas = bot_credential_schemas.installed
        self.credential_specs: dict[str, tuple[BotCredentialSpec, ...]] = (
            {platform: specs for platform, specs in schemas.fields().items() if specs} if schemas else {}
        )
        stored_platform = self.instance.platform if self.instance.pk else None
        stored = (self.instance.credentials or {}) if self.instance.pk else {}
        if self.instance.pk and stored_platform not in self.credential_specs:
            self.initial["credentials_input"] = bot_credentials_masked(self.instance)
        if self.instance.pk and "allowed_origins" in self.fields:
            self.initial["allowed_origins"] = "\n".join(self.instance.allowed_origins or [])
        self.fields["platform"].widget.attrs["data-credential-switch"] = "1"
        for platform, specs in self.credential_specs.items():
            own = platform == stored_platform
            for spec in specs:
                attrs = {"data-credential-platform": platform}
                label = spec.name if not spec.required else gettext("%(name)s (required)") % {"name": spec.name}
                widget: forms.Widget = (
                    StoredSecretInput(stored=own and spec.name in stored, attrs=attrs)
                    if spec.secret
                    else forms.TextInput(attrs={**attrs, "size": 60})
                )
                name = credential_field_name(platform, spec.name)
                self.fields[name] = forms.CharField(
                    label=label, required=False, widget=widget, help_text=_credential_help(spec), strip=True
                )
                if own and not spec.secret and spec.name in stored:
                    self.initial[name] = stored[spec.name]

    def credential_field_names(self) -> list[str]:
        """The credential fields, in the order the page shows them."""
        return [
            credential_field_name(platform, spec.name)
            for platform, specs in self.credential_specs.items()
            for spec in specs
        ]

    def clean_allowed_origins(self) -> list[str]:
        """One origin a line (or separated by commas or spaces), checked as the REST API checks them
        (`bindings.origins`): normalized, without repeats, only for a web bot."""
        given = [v for v in re.split(r"[\s,]+", str(self.cleaned_data.get("allowed_origins") or "")) if v]
        platform = self.data.get(self.add_prefix("platform")) or self.instance.platform
        try:
            return allowed_origins_normalized(given, platform=platform)
        except OriginsRefusedError as exc:
            raise forms.ValidationError([forms.ValidationError(m) for m in exc.messages]) from None

    def clean_credentials_input(self) -> Any:
        value = self.cleaned_data.get("credentials_input")
        if value in (None, ""):
            value = {}
        if not isinstance(value, dict):
            raise forms.ValidationError(gettext("Must be a JSON object."))
        return value

    def _credentials_of(self, platform: str) -> dict[str, Any]:
        """The credentials posted for `platform`: its fields when it declares some (an empty secret keeps
        the stored one, while the platform stays the same), else the JSON object."""
        kept = self.instance.pk and self.instance.platform == platform
        stored = (self.instance.credentials or {}) if kept else {}
        specs = self.credential_specs.get(platform)
        if specs is None:
            given = self.cleaned_data.get("credentials_input") or {}
            try:
                return credentials_merge(
                    given=given, stored=(self.instance.credentials or {}) if self.instance.pk else {}
                )
            except BindingValidationError as exc:
                self.add_error("credentials_input", list(exc.fields.values()))
                return {}
        credentials: dict[str, Any] = {}
        for spec in specs:
            value = self.cleaned_data.get(credential_field_name(platform, spec.name)) or ""
            if value:
                credentials[spec.name] = value
            elif spec.secret and spec.name in stored:
                credentials[spec.name] = stored[spec.name]
        return credentials

    def _credential_error(self, platform: str, key: str, message: str) -> None:
        name = key.split(".", 1)[1] if key.startswith("credentials.") else key
        field = credential_field_name(platform, name)
        if field in self.fields:
            self.add_error(field, message)
        elif key in self.fields:
            self.add_error(key, message)
        else:
            self.add_error("credentials_input" if platform not in self.credential_specs else None, f"{key}: {message}")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        platform = str(cleaned.get("platform") or self.instance.platform or "")
        if not platform or self.errors:
            return cleaned
        self.credentials = self._credentials_of(platform)
        if self.errors:
            return cleaned
        workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.pk else None)
        # A bot moved to another workspace is checked afresh, under that workspace's policy.
        kept = self.instance.pk and "workspace" not in self.changed_data
        stored = (self.instance.credentials or {}) if kept else {}
        if workspace is not None:
            try:
                bot_api_base_url_check(workspace=workspace, credentials=self.credentials, stored=stored)
            except URLRefusedError as exc:
                for key, message in exc.fields.items():
                    self._credential_error(platform, key, message)
        try:
            bot_credentials_check(platform=platform, credentials=self.credentials)
        except BindingValidationError as exc:
            for key, message in exc.fields.items():
                self._credential_error(platform, key, message)
        return cleaned


def bot_admin_form() -> type[BotAdminForm]:
    """The bot form class with a field declared for every platform's credentials (the admin renders only
    declared fields); `BotAdminForm.__init__` fills in each one's label, help and widget."""
    schemas = bot_credential_schemas.installed
    attrs: dict[str, Any] = {"__module__": __name__}
    for platform, specs in (schemas.fields() if schemas is not None else {}).items():
        for spec in specs:
            attrs[credential_field_name(platform, spec.name)] = forms.CharField(required=False)
    return type("BotCredentialsForm", (BotAdminForm,), attrs)
