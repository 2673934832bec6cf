"""App config of the completion webhooks."""

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "platforms.webhooks"
    label = "webhooks"
