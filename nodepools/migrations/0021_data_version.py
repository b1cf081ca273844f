"""A data version per cluster, raised by the database at every write of a node or pod row (nodepools.models.
DataVersion): the pages' dearest figures (the pods' usage per pool and project, the nodes' GPU room) are computed
once per change of the fleet, not once per request (nodepools.memo.fleet_memoised).

- SQLite: row triggers on the pods' and the nodes' tables;
- PostgreSQL: statement triggers with transition tables, one raise per cluster a statement touched.
"""
from django.db import migrations, models

from nodepools.migrations import _data_triggers


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        statements = _data_triggers.SQLITE_FORWARD
    elif vendor == "postgresql":
        statements = _data_triggers.POSTGRES_FORWARD
    else:
        raise NotImplementedError(f"no data-version triggers for {vendor}")
    for sql in statements:
        schema_editor.execute(sql)
    # The clusters that already hold rows start at 1.
    schema_editor.execute("INSERT INTO nodepools_dataversion (cluster_id, seq) SELECT id, 1 FROM nodepools_cluster")


def backward(apps, schema_editor):
    sqlite = schema_editor.connection.vendor == "sqlite"
    for sql in _data_triggers.SQLITE_BACKWARD if sqlite else _data_triggers.POSTGRES_BACKWARD:
        schema_editor.execute(sql)


class Migration(migrations.Migration):

    dependencies = [
        ('nodepools', '0020_pod_owner_scheduler'),
    ]

    operations = [
        migrations.CreateModel(
            name='DataVersion',
            fields=[
                ('cluster_id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('seq', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(forward, backward),
    ]
