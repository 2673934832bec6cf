from django.apps import AppConfig


class RuntimesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "runtimes"
    verbose_name = "Plugin runtimes"
