# The development tokens and sessions, taken over from the runners app with their tables and rows
# (runners 0010 gave them up). Permissions and admin history follow through their content types.


import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def content_types_move(apps, schema_editor):
    # Permissions and admin log entries point at the content type: moving it keeps them.
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="runners", model__in=["developmenttoken", "developmentsession"]).update(
        app_label="runtimes"
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("runners", "0010_development_models_leave_for_runtimes"),
        ("bindings", "0007_agent_binding_trigger_policy"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="DevelopmentToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(blank=True, max_length=100)),
                        ("prefix", models.CharField(max_length=16, unique=True)),
                        ("secret_sha256", models.CharField(max_length=64)),
                        ("expires_at", models.DateTimeField()),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "workspace",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="development_tokens",
                                to="bindings.workspace",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runners_developmenttoken",
                        "ordering": ["-id"],
                    },
                ),
                migrations.CreateModel(
                    name="DevelopmentSession",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("session_id", models.CharField(max_length=32, unique=True)),
                        ("peer", models.CharField(blank=True, max_length=100)),
                        ("runner_ids", models.JSONField(blank=True, default=list)),
                        ("connected_at", models.DateTimeField(auto_now_add=True)),
                        ("ended_at", models.DateTimeField(blank=True, null=True)),
                        ("close_reason", models.CharField(blank=True, max_length=200)),
                        (
                            "workspace",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="development_sessions",
                                to="bindings.workspace",
                            ),
                        ),
                        (
                            "token",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="sessions",
                                to="runtimes.developmenttoken",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runners_developmentsession",
                        "ordering": ["-id"],
                    },
                ),
            ],
            # The tables exist already (runners 0009): adopt them as they are.
            database_operations=[],
        ),
        migrations.RunPython(content_types_move, migrations.RunPython.noop),
    ]
