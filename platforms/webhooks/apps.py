"""App config of the completion webhooks: registers the observers (run end, action requested, handoff
requested) that record webhook messages."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WebhooksConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "platforms.webhooks"
    label = "webhooks"
    verbose_name = _("Completion webhooks")

    def ready(self) -> None:
        from platforms.webhooks.outbox import actions_requested_record, handoffs_requested_record, runs_ended_record
        from runners.actions.observers import action_requested_observer_register
        from runners.lifecycle.observers import run_end_observer_register
        from runners.takeover.services import handoff_requested_observer_register

        # Both in the observed transaction (the outbox): the delivery rows commit with the run end or the
        # request, or not at all; the senders are woken only after the commit.
        run_end_observer_register(runs_ended_record)
        action_requested_observer_register(actions_requested_record)
        handoff_requested_observer_register(handoffs_requested_record)
