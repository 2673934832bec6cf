"""`python manage.py create_api_key --workspace <slug> [--operator]`: print a new key for the workspace, once."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bindings.services import api_key_create, workspace_get_or_create


class Command(BaseCommand):
    help = "Create an API key for a workspace (creating the workspace if needed) and print only the key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--name", default="", help="a label for the key")
        parser.add_argument(
            "--operator",
            action="store_true",
            help="give the key the operator scope: host-wide operations such as POST /api/v1/runners/refresh",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        workspace = workspace_get_or_create(slug=options["workspace"])
        _, plaintext = api_key_create(workspace=workspace, name=options["name"], is_operator=options["operator"])
        self.stdout.write(plaintext)
