"""`python manage.py rotate_encryption_keys`: re-encrypt every stored secret with the first key of
LANGBOT_ENCRYPTION_KEYS, so older keys can then be removed."""

from typing import Any

from django.core.management.base import BaseCommand

from bindings.services import secrets_reencrypt


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret (bot credentials, binding secrets, model provider keys and headers) "
        "with the first LANGBOT_ENCRYPTION_KEYS key."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        counts = secrets_reencrypt()
        for label, count in counts.items():
            self.stdout.write(f"re-encrypted {count} {label}")
