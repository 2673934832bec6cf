"""`python manage.py sync_runners`: ask the plugin runtime for its runners and update the descriptors."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from langbot_sdk.protocol import AgentAPIException
from runtimes.catalog import runner_descriptors_refresh
from runtimes.link import runtime_link_reset


class Command(BaseCommand):
    help = "Sync RunnerDescriptor rows from the plugin runtime (LANGBOT_RUNTIME_URL)."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = runner_descriptors_refresh()
        except AgentAPIException as exc:
            raise CommandError(f"plugin runtime unavailable: {exc.error.message}") from exc
        finally:
            runtime_link_reset()
        for runner_id in result.available:
            self.stdout.write(f"available  {runner_id}")
        for runner_id in result.errored:
            self.stdout.write(self.style.WARNING(f"error      {runner_id}"))
        for runner_id in result.missing:
            self.stdout.write(self.style.WARNING(f"missing    {runner_id}"))
        for error in result.plugin_errors:
            self.stdout.write(self.style.ERROR(f"plugin failed to load: {error.get('path')}: {error.get('error')}"))
        for warning in result.plugin_warnings:
            self.stdout.write(self.style.WARNING(f"plugin warning: {warning.get('path')}: {warning.get('warning')}"))
