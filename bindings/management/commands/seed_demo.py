"""`python manage.py seed_demo`: the demo workspace and admin login that `make run` prints. Idempotent."""

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from bindings.models import WorkspaceMembership
from bindings.services import workspace_get_or_create, workspace_member_add

DEMO_USERNAME = "admin"


class Command(BaseCommand):
    help = "Create (or keep) the demo workspace and its admin user; prints the login."

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get("LANGBOT_DEMO_PASSWORD", "admin")
        workspace = workspace_get_or_create(slug="demo", name="Demo workspace")
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=DEMO_USERNAME, defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        workspace_member_add(workspace=workspace, user=user, role=WorkspaceMembership.Role.OWNER)
        self.stdout.write(f"demo workspace: {workspace.slug}")
        if created:
            self.stdout.write(f"admin login: {DEMO_USERNAME} / {password}")
        else:
            self.stdout.write(f"admin login: {DEMO_USERNAME} (existing user; password unchanged)")
