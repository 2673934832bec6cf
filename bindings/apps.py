"""App config of bindings: registers the OpenAPI description of API-key authentication."""

from django.apps import AppConfig


class BindingsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "bindings"

    def ready(self) -> None:
        from bindings import schema  # noqa: F401  (registers the drf-spectacular extension)
