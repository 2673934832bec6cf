from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("transcripts", "0006_verbose_names"),
    ]

    operations = [
        migrations.AlterField(
            model_name="eventlog",
            name="status",
            field=models.CharField(
                choices=[
                    ("accepted", "accepted (runs created)"),
                    ("no_binding", "no binding matched"),
                    ("conflict", "binding conflict"),
                    ("held", "held by a person (no run)"),
                    ("rate_limited", "rate limited (no run)"),
                ],
                default="accepted",
                max_length=16,
                verbose_name="status",
            ),
        ),
    ]
