"""URLs of the chat platforms (outside `/api/v1/`, docs/architecture.md, "The REST API")."""

from django.urls import path

from platforms.api import platform_webhook

urlpatterns = [
    path("<str:platform>/<slug:workspace_slug>/<slug:bot_id>/webhook", platform_webhook, name="platform-webhook"),
]
