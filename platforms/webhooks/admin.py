"""Admin of the completion webhooks: endpoints (the secret is generated on creation and shown once, in a
message; rotation is an action) and their delivery log (read-only, with a redeliver action)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import capfirst
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from bindings.selectors import workspace_private_addresses_allowed
from foundation.outbound import url_refusal
from foundation.readable import json_list_text
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEventType
from platforms.webhooks.outbox import runs_mark, subscribed_workspaces_forget
from platforms.webhooks.services import webhook_delivery_redeliver, webhook_secret_rotate
from platforms.webhooks.signing import secret_generate
from platforms.webhooks.specs import DEFAULT_GRACE_SECONDS


class WebhookEndpointAdminForm(forms.ModelForm[WebhookEndpoint]):
    url = forms.URLField(max_length=2000, assume_scheme="https")
    # Declared fields take no label from the model: named here, in the page's language.
    event_types = forms.MultipleChoiceField(
        label=capfirst(_("event types")), choices=WebhookEventType.choices, widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["workspace", "binding", "url", "description", "event_types", "enabled"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        binding, workspace = cleaned.get("binding"), cleaned.get("workspace")
        if binding is not None and workspace is not None and binding.workspace_id != workspace.pk:
            self.add_error("binding", gettext("The binding must belong to the endpoint's workspace."))
        url = cleaned.get("url")
        refusal = None
        if url and workspace is not None and ("url" in self.changed_data or "workspace" in self.changed_data):
            refusal = url_refusal(url, allow_private=workspace_private_addresses_allowed(workspace=workspace))
        if refusal is not None:
            self.add_error("url", refusal)
        return cleaned


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(WorkspaceScopedAdmin[WebhookEndpoint]):
    form = WebhookEndpointAdminForm
    list_display = ["webhook_id", "workspace", "url", "event_types_display", "binding", "enabled", "updated_at"]
    list_filter = ["enabled", "workspace"]
    search_fields = ["url", "description"]
    readonly_fields = ["webhook_id", "secret_display", "previous_secret_expires_at", "created_at", "updated_at"]
    scoped_foreign_keys = {"binding": "workspace"}
    actions = ["rotate_secret"]

    @admin.display(description=_("event types"))
    def event_types_display(self, obj: WebhookEndpoint) -> str:
        return json_list_text(obj.event_types)  # a list of names, not its JSON text

    @admin.display(description=_("secret"))
    def secret_display(self, obj: WebhookEndpoint) -> str:
        return gettext("whsec_******** (shown once when made or rotated)")

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool) -> None:
        secret = None
        if not change:
            secret = secret_generate()
            obj.secret = secret
            obj.runs_checked_through = runs_mark()
        super().save_model(request, obj, form, change)
        subscribed_workspaces_forget()
        if secret is not None:
            messages.warning(
                request,
                gettext("Signing secret of %(url)s (shown only now, copy it): %(secret)s")
                % {"url": obj.url, "secret": secret},
            )

    @admin.action(description=_("Rotate the signing secret (the old one signs for 24 more hours)"))
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset:
            _endpoint, secret = webhook_secret_rotate(endpoint=endpoint, grace_seconds=DEFAULT_GRACE_SECONDS)
            messages.warning(
                request,
                gettext("New signing secret of %(url)s (shown only now, copy it): %(secret)s")
                % {"url": endpoint.url, "secret": secret},
            )


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(WorkspaceScopedAdmin[WebhookDelivery]):
    list_display = [
        "delivery_id", "endpoint", "event_type", "event_id", "status", "attempts", "last_status_code",
        "next_attempt_at", "created_at",
    ]  # fmt: skip
    list_filter = ["status", "event_type", "workspace"]
    search_fields = ["event_id", "run_id", "delivery_id"]
    list_select_related = ["endpoint", "workspace"]
    actions = ["redeliver"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: WebhookDelivery | None = None) -> bool:
        return False

    @admin.action(description=_("Redeliver (send the message again)"), permissions=["view"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = 0
        for delivery in queryset.select_related("redelivery_of"):
            webhook_delivery_redeliver(delivery=delivery)
            count += 1
        messages.info(
            request,
            ngettext("%(count)d delivery queued again.", "%(count)d deliveries queued again.", count)
            % {"count": count},
        )
