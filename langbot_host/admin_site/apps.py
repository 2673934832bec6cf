"""Two app configs: `ConsoleAdminConfig` replaces `django.contrib.admin` in INSTALLED_APPS so that the default
admin site (`admin.site`) is the console's (site.py); `ConsoleConfig` is this package as an app of its own, so
its static files (the chart library, the dashboard's script and style) and template tags are found."""

from __future__ import annotations

from django.apps import AppConfig

# The module, not the class: a second AppConfig marked `default` in this module's namespace would be ambiguous.
from django.contrib.admin import apps as admin_apps


class ConsoleAdminConfig(admin_apps.AdminConfig):
    default = False
    default_site = "langbot_host.admin_site.site.ConsoleAdminSite"

    def ready(self) -> None:
        super().ready()  # discovers every app's admin.py
        from django.contrib import admin

        from langbot_host.admin_site.navigation import HIDDEN_APPS

        for model in [m for m in admin.site._registry if m._meta.app_label in HIDDEN_APPS]:
            admin.site.unregister(model)


class ConsoleConfig(AppConfig):
    default = True
    name = "langbot_host.admin_site"
    label = "console"
    verbose_name = "Console"
