"""App config of bindings: registers the OpenAPI description of API-key authentication."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BindingsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "bindings"
    verbose_name = _("Bindings")

    def ready(self) -> None:
        from bindings import schema  # noqa: F401  (registers the drf-spectacular extension)
