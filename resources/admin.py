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

from bindings.selectors import workspaces_of_member
from resources.clients import ProviderCallError, provider_models_list
from resources.forms import ModelAdminForm, ModelProviderAdminForm
from resources.models import Model, ModelProvider

# How many model ids a successful test shows before "and N more".
SHOWN_MODEL_IDS = 20


def _is_superuser(request: HttpRequest) -> bool:
    return bool(getattr(request.user, "is_superuser", False))


@admin.register(ModelProvider)
class ModelProviderAdmin(admin.ModelAdmin[ModelProvider]):
    form = ModelProviderAdminForm
    list_display = ["provider_id", "workspace", "name", "base_url", "timeout_seconds", "max_retries", "updated_at"]
    list_filter = ["workspace"]
    search_fields = ["provider_id", "name", "base_url"]
    prepopulated_fields = {"provider_id": ["name"]}
    readonly_fields = ["created_at", "updated_at"]
    actions = ["test_connection"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelProvider]:
        queryset = super().get_queryset(request).select_related("workspace")
        if _is_superuser(request):
            return queryset
        return queryset.filter(workspace__in=workspaces_of_member(user_id=request.user.pk))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "workspace" and not _is_superuser(request):
            kwargs["queryset"] = workspaces_of_member(user_id=request.user.pk)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: ModelProvider | None = None) -> list[str]:
        # The ids are what bindings and runners refer to: fixed once made.
        return [*self.readonly_fields, "workspace", "provider_id"] if obj else list(self.readonly_fields)

    def get_prepopulated_fields(self, request: HttpRequest, obj: ModelProvider | None = None) -> dict[str, Any]:
        return {} if obj else dict(self.prepopulated_fields)

    def save_model(self, request: HttpRequest, obj: ModelProvider, form: Any, change: bool) -> None:
        assert isinstance(form, ModelProviderAdminForm)
        obj.api_key = form.api_key
        obj.headers = form.headers
        super().save_model(request, obj, form, change)

    @admin.action(description="Test connection (list the provider's models)")
    def test_connection(self, request: HttpRequest, queryset: QuerySet[ModelProvider]) -> None:
        for provider in queryset:
            try:
                model_ids = provider_models_list(provider)
            except ProviderCallError as exc:
                messages.error(request, f"{provider.provider_id}: {exc}")
                continue
            shown = ", ".join(model_ids[:SHOWN_MODEL_IDS]) or "(none)"
            more = f" and {len(model_ids) - SHOWN_MODEL_IDS} more" if len(model_ids) > SHOWN_MODEL_IDS else ""
            messages.success(request, f"{provider.provider_id}: connected; {len(model_ids)} model(s): {shown}{more}")


@admin.register(Model)
class ModelAdmin(admin.ModelAdmin[Model]):
    form = ModelAdminForm
    list_display = ["model_id", "workspace", "provider", "name", "kind", "supports_tools", "supports_vision"]
    list_filter = ["kind", "workspace"]
    search_fields = ["model_id", "name"]
    readonly_fields = ["created_at", "updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Model]:
        queryset = super().get_queryset(request).select_related("workspace", "provider")
        if _is_superuser(request):
            return queryset
        return queryset.filter(workspace__in=workspaces_of_member(user_id=request.user.pk))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if not _is_superuser(request):
            if db_field.name == "workspace":
                kwargs["queryset"] = workspaces_of_member(user_id=request.user.pk)
            elif db_field.name == "provider":
                member_of = workspaces_of_member(user_id=request.user.pk)
                kwargs["queryset"] = ModelProvider.objects.filter(workspace__in=member_of)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return [*self.readonly_fields, "workspace", "model_id"] if obj else list(self.readonly_fields)


# The admin of MCP servers and knowledge bases lives with them; importing registers it.
from resources.knowledge import admin as _knowledge_admin  # noqa: E402, F401
from resources.mcp import admin as _mcp_admin  # noqa: E402, F401
