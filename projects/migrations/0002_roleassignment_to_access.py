# RoleAssignment now lives in the access app (same table): state only, no SQL.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('projects', '0001_initial'),
        ('access', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='RoleAssignment')],
            database_operations=[],
        ),
    ]
