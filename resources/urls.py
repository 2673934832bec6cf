"""Routes of the resources app under `/api/v1/`."""

from django.urls import include, path

from resources.api import ModelDetailApi, ModelListApi, ModelProviderDetailApi, ModelProviderListApi

urlpatterns = [
    path("model-providers", ModelProviderListApi.as_view(), name="model-provider-list"),
    path("model-providers/<slug:provider_id>", ModelProviderDetailApi.as_view(), name="model-provider-detail"),
    path("models", ModelListApi.as_view(), name="model-list"),
    path("models/<slug:model_id>", ModelDetailApi.as_view(), name="model-detail"),
    path("", include("resources.mcp.urls")),
    path("", include("resources.knowledge.urls")),
]
