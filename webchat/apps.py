from django.apps import AppConfig


class WebchatConfig(AppConfig):
    name = "webchat"
    verbose_name = "Debug chat"
