"""The covering index of the usage queries belongs to the Pod model and survives both histories:
a database built from scratch, and one that got the index from the old raw-SQL ui migration.

The second history is played on a scratch database of its own (the test database's engine), migrated only as far
as the migration that takes the index over needs: unapplying it on the test database would unapply, and then
apply again, every later migration of every app (about a minute on SQLite, more on PostgreSQL)."""
import os
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection, connections
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db

# The index as the migration that took it over made it, and as it is now (0022: the scheduler too).
TAKEN_OVER_COLUMNS = ["node_id", "phase", "project_id", "priority", "gpus", "cpu_millis", "memory_bytes"]
COLUMNS = [*TAKEN_OVER_COLUMNS, "scheduler_name"]
BEFORE = [("nodepools", "0003_cluster_hint_seq")]
TAKEN_OVER = [("nodepools", "0004_pod_usage_cover")]


def pod_indexes(conn=connection):
    with conn.cursor() as cursor:
        constraints = conn.introspection.get_constraints(cursor, "nodepools_pod")
    return {name: c["columns"] for name, c in constraints.items() if c["index"]}


@contextmanager
def _connection(alias: str, settings: dict):
    """A connection made here (Django's test case allows one it was not told of), registered under `alias` for
    the migrations that look their connection up by alias, closed and forgotten afterwards."""
    made = type(connections["default"])(settings, alias=alias)
    connections[alias] = made
    try:
        yield made
    finally:
        made.close()
        del connections[alias]


@contextmanager
def scratch_database():
    """A connection to a new, empty database of the test database's engine, dropped afterwards."""
    settings = {**connection.settings_dict}
    if connection.vendor == "sqlite":
        with tempfile.TemporaryDirectory() as folder, \
                _connection("scratch", {**settings, "NAME": str(Path(folder) / "scratch.sqlite3")}) as scratch:
            yield scratch
        return
    name = f"scratch_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with _connection("scratch_admin", {**settings, "NAME": "postgres"}) as admin:
        with admin.cursor() as cursor:  # autocommit: CREATE DATABASE runs outside a transaction
            cursor.execute(f'CREATE DATABASE "{name}"')
        try:
            with _connection("scratch", {**settings, "NAME": name}) as scratch:
                yield scratch
        finally:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


def migrate(conn, targets):
    executor = MigrationExecutor(conn)
    executor.loader.build_graph()
    executor.migrate(targets)


def test_migrated_database_has_the_covering_index_with_its_columns_in_order():
    assert pod_indexes()["pod_usage_cover"] == COLUMNS


def test_index_created_by_the_old_raw_sql_migration_is_taken_over():
    with scratch_database() as scratch:
        migrate(scratch, BEFORE)
        assert "pod_usage_cover" not in pod_indexes(scratch)
        # What ui.0002 used to run, on a database migrated before the index moved to nodepools.
        with scratch.cursor() as cursor:
            columns = ", ".join(TAKEN_OVER_COLUMNS)
            cursor.execute(f"CREATE INDEX IF NOT EXISTS pod_usage_cover ON nodepools_pod ({columns})")
        migrate(scratch, TAKEN_OVER)
        assert pod_indexes(scratch)["pod_usage_cover"] == TAKEN_OVER_COLUMNS
        # And back: unapplying the nodepools migration removes the index it owns.
        migrate(scratch, BEFORE)
        assert "pod_usage_cover" not in pod_indexes(scratch)
        # Forward again from there, as a database that never had the raw-SQL index.
        migrate(scratch, TAKEN_OVER)
        assert pod_indexes(scratch)["pod_usage_cover"] == TAKEN_OVER_COLUMNS
