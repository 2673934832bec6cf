from django.db import migrations, models
import django.db.models.deletion


class Migration(migrations.Migration):

    dependencies = [
        ('artifacts', '0002_upload_source_and_expiry_index'),
        ('bindings', '0002_bots_and_agent_bindings'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkspaceArtifactSettings',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('runner_upload_max_bytes', models.PositiveBigIntegerField(blank=True, help_text="Largest artifact a runner may upload (bytes). Empty: the host's default (100 MiB); 0: none.", null=True)),
                ('workspace', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='artifact_settings', to='bindings.workspace')),
            ],
            options={
                'verbose_name': 'workspace artifact settings',
                'verbose_name_plural': 'workspace artifact settings',
            },
        ),
    ]
