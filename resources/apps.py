"""App config of resources: model providers and models, MCP servers and tools, knowledge bases."""

from django.apps import AppConfig


class ResourcesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "resources"

    def ready(self) -> None:
        # The binding form (a layer below) lists this app's resources through its catalog port.
        from resources.catalog import resource_catalog_fill

        resource_catalog_fill()
