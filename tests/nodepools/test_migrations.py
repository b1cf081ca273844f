"""The covering index of the usage queries belongs to the Pod model and survives both histories:
a database built from scratch, and one that got the index from the old raw-SQL ui migration."""
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

COLUMNS = ["node_id", "phase", "project_id", "priority", "gpus", "cpu_millis", "memory_bytes"]
BEFORE = [("nodepools", "0003_cluster_hint_seq")]


def pod_indexes():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "nodepools_pod")
    return {name: c["columns"] for name, c in constraints.items() if c["index"]}


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


def test_migrated_database_has_the_covering_index_with_its_columns_in_order():
    assert pod_indexes()["pod_usage_cover"] == COLUMNS


def test_index_created_by_the_old_raw_sql_migration_is_taken_over():
    try:
        migrate(BEFORE)
        assert "pod_usage_cover" not in pod_indexes()
        # What ui.0002 used to run, on a database migrated before the index moved to nodepools.
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE INDEX IF NOT EXISTS pod_usage_cover ON nodepools_pod ({', '.join(COLUMNS)})")
        migrate(latest())
        assert pod_indexes()["pod_usage_cover"] == COLUMNS
        # And back: unapplying the nodepools migration removes the index it owns.
        migrate(BEFORE)
        assert "pod_usage_cover" not in pod_indexes()
    finally:
        migrate(latest())
    assert pod_indexes()["pod_usage_cover"] == COLUMNS
