"""Routes of the completion webhooks under `/api/v1/`."""

from django.urls import path

from platforms.webhooks.api import (
    WebhookDeliveryListApi,
    WebhookDetailApi,
    WebhookListApi,
    WebhookRedeliverApi,
    WebhookSecretRotateApi,
)

urlpatterns = [
    path("webhooks", WebhookListApi.as_view(), name="webhook-list"),
    path("webhooks/<str:webhook_id>", WebhookDetailApi.as_view(), name="webhook-detail"),
    path("webhooks/<str:webhook_id>/rotate-secret", WebhookSecretRotateApi.as_view(), name="webhook-rotate-secret"),
    path("webhooks/<str:webhook_id>/deliveries", WebhookDeliveryListApi.as_view(), name="webhook-delivery-list"),
    path(
        "webhooks/<str:webhook_id>/deliveries/<str:delivery_id>/redeliver",
        WebhookRedeliverApi.as_view(),
        name="webhook-redeliver",
    ),
]
