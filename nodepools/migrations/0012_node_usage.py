"""What each node's running pods use, kept on the node by the database (issue 25): the nodes table sorts by
allocated GPUs through an index, the nodes CSV and "Why is it waiting?" read it without summing every pod.

Triggers on the pods table recount the usage of the nodes a write touched (a pod bound to a node, neither
Succeeded nor Failed, counts: `PodQuerySet.active()`), whoever writes (the sync's row and bulk upserts, the
ORM, a node's deletion setting its pods' node to NULL):
- SQLite: row triggers (insert, delete, an update of node, phase or requests), each recounting one node
  through the (node, phase, ...) index;
- PostgreSQL: statement triggers with transition tables, recounting each touched node once per statement
  (a full list of 50,000 pods upserted by the sync's COPY is one recount of the nodes, not 50,000).
"""
from decimal import Decimal

from django.db import migrations, models

from nodepools.migrations._usage_triggers import (  # noqa: E402
    BACKFILL, POSTGRES_BACKWARD, POSTGRES_FORWARD, SQLITE_BACKWARD, SQLITE_FORWARD)


def _run(schema_editor, statements):
    for sql in statements:
        schema_editor.execute(sql)


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_FORWARD)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRES_FORWARD)
    else:
        raise NotImplementedError(f"no usage triggers for {vendor}")
    schema_editor.execute(BACKFILL)


def backward(apps, schema_editor):
    _run(schema_editor, SQLITE_BACKWARD if schema_editor.connection.vendor == "sqlite" else POSTGRES_BACKWARD)


class Migration(migrations.Migration):

    dependencies = [
        ('nodepools', '0011_pool_topology_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='node', name='usage_gpus',
            field=models.DecimalField(db_default=Decimal('0'), decimal_places=3, default=Decimal('0'), editable=False,
                                      max_digits=14),
        ),
        migrations.AddField(
            model_name='node', name='usage_cpu_millis',
            field=models.BigIntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name='node', name='usage_memory_bytes',
            field=models.BigIntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name='node', name='usage_pods',
            field=models.IntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddIndex(model_name='node', index=models.Index(fields=['name'], name='node_name')),
        migrations.AddIndex(model_name='node', index=models.Index(fields=['usage_gpus'], name='node_usage_gpus')),
        migrations.RunPython(forward, backward),
    ]
