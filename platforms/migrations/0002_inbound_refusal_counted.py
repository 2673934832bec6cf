"""Inbound refusals become counted rows: one per bot, reason, source address and window, with `count`,
`first_at` and `last_at` instead of one row per refused request. Existing rows keep their time as all
three."""

from typing import Any

import django.utils.timezone
from django.db import migrations, models


def _times_from_first(apps: Any, schema_editor: Any) -> None:
    InboundRefusal = apps.get_model("platforms", "InboundRefusal")
    InboundRefusal.objects.update(window_start=models.F("first_at"), last_at=models.F("first_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("platforms", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="inboundrefusal",
            options={"ordering": ["-last_at", "-id"]},
        ),
        migrations.RenameField(model_name="inboundrefusal", old_name="created_at", new_name="first_at"),
        migrations.AlterField(
            model_name="inboundrefusal",
            name="first_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="inboundrefusal",
            name="count",
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.AddField(
            model_name="inboundrefusal",
            name="last_at",
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="inboundrefusal",
            name="window_start",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.RunPython(_times_from_first, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="inboundrefusal",
            name="remote_addr",
            field=models.CharField(
                blank=True, help_text="The source address (an IPv6 source as its /64 network).", max_length=64
            ),
        ),
        migrations.AddConstraint(
            model_name="inboundrefusal",
            constraint=models.UniqueConstraint(
                fields=("bot", "reason", "remote_addr", "window_start"), name="inbound_refusal_per_window"
            ),
        ),
    ]
