from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ArtifactsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "artifacts"
    verbose_name = _("Artifacts")
