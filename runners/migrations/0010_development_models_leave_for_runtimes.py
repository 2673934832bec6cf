# The development tokens and sessions moved to the runtimes app (runtimes 0001 takes them over). Their tables
# stay as they are: only Django's record of which app owns them changes.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runners", "0009_development_tokens_and_sessions"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="DevelopmentSession"),
                migrations.DeleteModel(name="DevelopmentToken"),
            ],
            database_operations=[],
        ),
    ]
