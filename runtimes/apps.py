from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RuntimesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "runtimes"
    verbose_name = _("Plugin runtimes")
