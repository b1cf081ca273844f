"""Formerly created the covering index `pod_usage_cover` on the pods table by raw SQL.

The index now belongs to its model (`nodepools.Pod.Meta.indexes`, migration
`nodepools.0004_pod_usage_cover`, which also takes over the index on databases that ran the old
version of this migration). Kept, empty, so that the migration graph and the databases that recorded
it as applied stay valid.
"""
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ui", "0001_initial"),
        ("nodepools", "0002_initial"),
    ]

    operations = []
