"""App config of the scheduled events."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SchedulesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "platforms.schedules"
    label = "schedules"
    verbose_name = _("Scheduled events")
