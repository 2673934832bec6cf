from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = _("Event gateway")
