"""`python manage.py platform_matrix [--write]`: print the platform matrix generated from the adapters'
declarations, or write it into the README's matrix section (`platforms.matrix`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from platforms.matrix import matrix_markdown, readme_path, readme_with_matrix


class Command(BaseCommand):
    help = "Print the platform matrix generated from the adapters, or write it into README.md (--write)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--write", action="store_true", help="rewrite the README's matrix section")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["write"]:
            self.stdout.write(matrix_markdown())
            return
        path = readme_path()
        try:
            updated = readme_with_matrix(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        path.write_text(updated, encoding="utf-8")
        self.stdout.write(f"wrote the platform matrix into {path}")
