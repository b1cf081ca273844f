"""A covering index for the pages' usage queries (one grouped pass over the pods of some pools).

The pages sum what running pods use per node, pool and project (GPUs, CPU, memory); with this index
SQLite and PostgreSQL read only the index instead of every pod row (about 10x faster at 50,000 pods,
see bench/pages.py). It is created here, by raw SQL, because the Pod model belongs to `nodepools`;
moving it into `Pod.Meta.indexes` (same name and columns) is the natural next step.
"""
from django.db import migrations

COLUMNS = "node_id, phase, project_id, priority, gpus, cpu_millis, memory_bytes"


class Migration(migrations.Migration):
    dependencies = [
        ("ui", "0001_initial"),
        ("nodepools", "0002_initial"),
    ]

    operations = [
        migrations.RunSQL(
            sql=f"CREATE INDEX IF NOT EXISTS pod_usage_cover ON nodepools_pod ({COLUMNS})",
            reverse_sql="DROP INDEX IF EXISTS pod_usage_cover",
        ),
    ]
