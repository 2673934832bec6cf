"""App config of platforms: the chat-platform adapters and the delivery port they fill."""

from django.apps import AppConfig


class PlatformsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "platforms"
