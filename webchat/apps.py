from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WebchatConfig(AppConfig):
    name = "webchat"
    verbose_name = _("Debug chat")
