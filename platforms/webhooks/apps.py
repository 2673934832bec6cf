"""App config of the completion webhooks: registers the run-end observer that records webhook messages."""

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "platforms.webhooks"
    label = "webhooks"
    verbose_name = "Completion webhooks"

    def ready(self) -> None:
        from platforms.webhooks.outbox import runs_ended_record
        from runners.lifecycle.observers import run_end_observer_register

        run_end_observer_register(runs_ended_record)
