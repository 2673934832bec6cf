from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RunnersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "runners"
    verbose_name = _("Runners")

    def ready(self) -> None:
        from runners.lifecycle.observers import run_end_observer_register
        from runners.lifecycle.retry import runs_retry

        # Bindings that opt in (`delivery_policy.retry`) get a new attempt of runs lost to a host fault. In
        # the ending transaction: the new attempt's row commits with the end; its dispatch waits for the commit.
        run_end_observer_register(runs_retry)
