# The run's OpenTelemetry trace id. Existing runs keep an empty one (Run.trace_hex falls back to the run id),
# so adding the column rewrites nothing.

import foundation.tracing
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runners', '0013_verbose_names'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='trace_id',
            field=models.CharField(blank=True, default='', editable=False, max_length=32, verbose_name='trace id'),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name='run',
            name='trace_id',
            field=models.CharField(blank=True, default=foundation.tracing.run_trace_id_new, editable=False, max_length=32, verbose_name='trace id'),
        ),
    ]
