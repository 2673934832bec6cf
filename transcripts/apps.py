from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TranscriptsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "transcripts"
    verbose_name = _("Transcripts")

    def ready(self) -> None:
        # Registers the OpenAPI extension for this app's (and the runs API's) pydantic models.
        from transcripts import schema  # noqa: F401
