"""`python manage.py create_api_key --workspace <slug> [--scopes events:write,runs:read] [--operator]`: print a
new key for the workspace, once."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bindings.roles import SCOPES, scopes_parse
from bindings.services import api_key_create, workspace_get_or_create


class Command(BaseCommand):
    help = "Create an API key for a workspace (creating the workspace if needed) and print only the key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--name", default="", help="a label for the key")
        parser.add_argument(
            "--scopes",
            default="",
            help="comma-separated scopes the key is narrowed to (without: every scope of its workspace); "
            f"known: {', '.join(SCOPES)}",
        )
        parser.add_argument(
            "--operator",
            action="store_true",
            help="give the key the operator scope: host-wide operations such as POST /api/v1/runners/refresh",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            scopes = scopes_parse(options["scopes"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        workspace = workspace_get_or_create(slug=options["workspace"])
        _, plaintext = api_key_create(
            workspace=workspace, name=options["name"], is_operator=options["operator"], scopes=scopes
        )
        self.stdout.write(plaintext)
