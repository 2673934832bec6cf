from django.apps import AppConfig


class TranscriptsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "transcripts"

    def ready(self) -> None:
        # Registers the OpenAPI extension for this app's (and the runs API's) pydantic models.
        from transcripts import schema  # noqa: F401
