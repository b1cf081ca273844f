"""The covering index of the pages' usage queries, now declared in `Pod.Meta.indexes`.

It was first created by raw SQL in `ui.0002_pod_usage_index` (now a no-op), with the same name and
columns. A database migrated before this change already has it: the index is dropped if present and
created again by Django, so that both histories end with the same index and migration state.
"""
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("nodepools", "0003_cluster_hint_seq"),
    ]

    operations = [
        # SQLite and PostgreSQL both know DROP INDEX IF EXISTS; reversed, it leaves nothing to restore.
        migrations.RunSQL("DROP INDEX IF EXISTS pod_usage_cover", reverse_sql=migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="pod",
            index=models.Index(
                fields=["node", "phase", "project", "priority", "gpus", "cpu_millis", "memory_bytes"],
                name="pod_usage_cover",
            ),
        ),
    ]
