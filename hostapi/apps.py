from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class HostapiConfig(AppConfig):
    name = "hostapi"
    verbose_name = _("Host API")

    def ready(self) -> None:
        from hostapi.dispatch import proxy_handlers
        from runners.access.proxy import proxy_handlers_port

        # The workers serve every runtime → host call of their runs with these.
        proxy_handlers_port.install(proxy_handlers)
