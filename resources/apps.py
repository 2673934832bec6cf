"""App config of resources: model providers and models, MCP servers and tools, knowledge bases."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ResourcesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "resources"
    verbose_name = _("Resources")

    def ready(self) -> None:
        # The binding form (a layer below) lists this app's resources through its catalog port.
        from resources.catalog import resource_catalog_fill

        resource_catalog_fill()
