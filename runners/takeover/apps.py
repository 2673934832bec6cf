"""App config of human takeover (its own app label, so its migrations stand apart from the run ledger's)."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TakeoverConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "runners.takeover"
    label = "takeover"
    verbose_name = _("Human takeover")
