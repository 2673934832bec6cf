"""Workspace roles (viewer, operator, developer, admin, owner) in place of owner/member, and API-key scopes.

Existing members move so that nobody loses a right they had: an owner stays owner, a member becomes admin
(before roles, a member could do whatever their model permissions allowed), and a workspace that had
members but no owner gets its first member (the oldest membership) as owner, so every workspace with
members has someone who may manage owners. Existing keys get no scopes: every scope of their workspace.
"""

from typing import Any

from django.db import migrations, models


def roles_forward(apps: Any, schema_editor: Any) -> None:
    membership = apps.get_model("bindings", "WorkspaceMembership")
    membership.objects.exclude(role="owner").update(role="admin")
    owned = set(membership.objects.filter(role="owner").values_list("workspace_id", flat=True))
    first_of: dict[int, int] = {}
    for pk, workspace_id in membership.objects.order_by("pk").values_list("pk", "workspace_id"):
        if workspace_id not in owned:
            first_of.setdefault(workspace_id, pk)
    membership.objects.filter(pk__in=first_of.values()).update(role="owner")


def roles_backward(apps: Any, schema_editor: Any) -> None:
    membership = apps.get_model("bindings", "WorkspaceMembership")
    membership.objects.exclude(role="owner").update(role="member")


class Migration(migrations.Migration):
    dependencies = [
        ("bindings", "0010_bot_platform_qq_official_mattermost"),
    ]

    operations = [
        migrations.AlterField(
            model_name="workspacemembership",
            name="role",
            field=models.CharField(
                choices=[
                    ("viewer", "viewer"),
                    ("operator", "operator"),
                    ("developer", "developer"),
                    ("admin", "admin"),
                    ("owner", "owner"),
                ],
                default="viewer",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="scopes",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="What the key may do, e.g. events:write and runs:read. None chosen: everything in its "
                "workspace.",
            ),
        ),
        migrations.RunPython(roles_forward, roles_backward),
    ]
