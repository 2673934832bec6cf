# The runner catalog now belongs to the bindings app (bindings.0003); its table and rows stay as they are.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('runners', '0005_run_active_indexes'),
        ('bindings', '0003_runner_descriptor'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='RunnerDescriptor')],
            database_operations=[],
        ),
    ]
