"""App config of platforms: the chat-platform adapters and the delivery port they fill."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PlatformsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "platforms"
    verbose_name = _("Platforms")

    def ready(self) -> None:
        # `runners` reaches the adapters only through this port (docs/architecture.md, "The apps and their layers").
        from bindings.services import bot_credential_schemas
        from platforms.credentials import AdapterCredentialSchemas
        from platforms.delivery import PlatformDeliveryPort
        from platforms.inbound import inbound_refusals_purge
        from platforms.registry import adapter_classes
        from runners.actions.delivery import delivery_port_install
        from runners.lifecycle.retention import retention_purge_install
        from transcripts.models import RetentionPurge

        adapter_classes()  # an adapter that cannot be imported fails start-up, not the first message
        delivery_port_install(PlatformDeliveryPort())
        # `bindings` checks a bot's credentials against its adapter's schema through this port.
        bot_credential_schemas.install(AdapterCredentialSchemas())
        # The retention sweep lives in `runners`, which cannot import this app's rows.
        retention_purge_install(
            kind=RetentionPurge.Kind.INBOUND_REFUSALS,
            days=lambda policy: policy.inbound_refusal_days,
            purge=inbound_refusals_purge,
        )
