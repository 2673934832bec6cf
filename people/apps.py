from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PeopleConfig(AppConfig):
    name = "people"
    verbose_name = _("people")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The runners app stands below this one: it asks for the person of a run's actor through its port,
        # and the retention sweep runs this app's purge (both installed here, as the platforms install theirs).
        from people.retention import people_purge
        from people.services import person_of_actor
        from runners.lifecycle.retention import retention_purge_install
        from runners.orchestrator.people import person_port

        person_port.install(person_of_actor)
        retention_purge_install(kind="person_data", days=lambda policy: policy.person_days, purge=people_purge)
