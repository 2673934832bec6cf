# The runner catalog moves from the runners app to bindings without moving its rows: only Django's model
# state changes (runners.0006 forgets the model, this migration takes it over on the same table).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('bindings', '0002_bots_and_agent_bindings'),
        ('runners', '0005_run_active_indexes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='RunnerDescriptor',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('runner_id', models.CharField(max_length=255, unique=True)),
                        ('plugin_author', models.CharField(max_length=64)),
                        ('plugin_name', models.CharField(max_length=64)),
                        ('plugin_version', models.CharField(blank=True, max_length=64)),
                        ('runner_name', models.CharField(max_length=64)),
                        ('label', models.JSONField(default=dict)),
                        ('description', models.JSONField(blank=True, default=dict)),
                        ('capabilities', models.JSONField(default=dict)),
                        ('permissions', models.JSONField(default=dict)),
                        ('context_policy', models.JSONField(default=dict)),
                        ('config_schema', models.JSONField(default=list)),
                        ('manifest', models.JSONField(default=dict)),
                        ('manifest_sha256', models.CharField(blank=True, max_length=64)),
                        ('status', models.CharField(choices=[('available', 'available'), ('error', 'load error'), ('missing', 'missing')], db_index=True, default='available', max_length=16)),
                        ('load_error', models.TextField(blank=True)),
                        ('last_seen_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'ordering': ['runner_id'],
                        'db_table': 'runners_runnerdescriptor',
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
