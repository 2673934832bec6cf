"""Admin for model providers and models.

Superusers see everything; other staff see and edit only the providers and models of workspaces they
belong to. A provider's API key and headers are only ever shown masked. "Test connection" asks each
selected provider for its models (`GET {base_url}/models`) and shows the answer or the error.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from resources.forms import ModelAdminForm, ModelProviderAdminForm
from resources.models import Model, ModelProvider
from resources.providers.clients import provider_models_list
from resources.providers.failures import ProviderCallError

# How many model ids a successful test shows before "and N more".
SHOWN_MODEL_IDS = 20


@admin.register(ModelProvider)
class ModelProviderAdmin(WorkspaceScopedAdmin[ModelProvider]):
    form = ModelProviderAdminForm
    list_display = ["provider_id", "workspace", "name", "base_url", "timeout_seconds", "max_retries", "updated_at"]
    list_filter = ["workspace"]
    search_fields = ["provider_id", "name", "base_url"]
    prepopulated_fields = {"provider_id": ["name"]}
    readonly_fields = ["created_at", "updated_at"]
    actions = ["test_connection"]
    fixed_fields = ("workspace", "provider_id")

    def save_model(self, request: HttpRequest, obj: ModelProvider, form: Any, change: bool) -> None:
        assert isinstance(form, ModelProviderAdminForm)
        obj.api_key = form.api_key
        obj.headers = form.headers
        super().save_model(request, obj, form, change)

    @admin.action(description=_("Test connection (list the provider's models)"))
    def test_connection(self, request: HttpRequest, queryset: QuerySet[ModelProvider]) -> None:
        for provider in queryset:
            try:
                model_ids = provider_models_list(provider)
            except ProviderCallError as exc:
                messages.error(request, f"{provider.provider_id}: {exc}")
                continue
            shown = ", ".join(model_ids[:SHOWN_MODEL_IDS]) or gettext("(none)")
            extra = len(model_ids) - SHOWN_MODEL_IDS
            more = gettext(" and %(count)d more") % {"count": extra} if extra > 0 else ""
            connected = gettext("%(provider)s: connected; %(count)d model(s): %(shown)s%(more)s")
            messages.success(
                request,
                connected % {"provider": provider.provider_id, "count": len(model_ids), "shown": shown, "more": more},
            )


@admin.register(Model)
class ModelAdmin(WorkspaceScopedAdmin[Model]):
    form = ModelAdminForm
    list_display = [
        "model_id",
        "workspace",
        "provider",
        "name",
        "kind",
        "supports_tools",
        "supports_vision",
        "input_price_per_million",
        "output_price_per_million",
    ]
    list_filter = ["kind", "workspace"]
    search_fields = ["model_id", "name"]
    readonly_fields = ["created_at", "updated_at"]
    list_select_related = ["workspace", "provider"]
    fixed_fields = ("workspace", "model_id")
    scoped_foreign_keys = {"provider": "workspace"}


# The admin of MCP servers and knowledge bases lives with them; importing registers it.
from resources.knowledge import admin as _knowledge_admin  # noqa: E402, F401
from resources.mcp import admin as _mcp_admin  # noqa: E402, F401
