"""App config of resources: model providers and models, MCP servers and tools, knowledge bases."""

from django.apps import AppConfig


class ResourcesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "resources"
