"""App config of the scheduled events."""

from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "platforms.schedules"
    label = "schedules"
    verbose_name = "Scheduled events"
