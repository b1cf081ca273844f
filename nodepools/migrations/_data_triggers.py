"""The SQL of the data-version triggers (migration 0021_data_version): every write of a node or pod row raises
its cluster's `nodepools_dataversion.seq` in the writing transaction. Kept apart so that a later migration that
rebuilds the pods' or the nodes' table on SQLite (which drops their triggers) makes them again
(`_usage_triggers.sqlite_triggers_again` does it once the table exists)."""

TABLES = ("nodepools_pod", "nodepools_node")

# (Not INSERT OR IGNORE: inside a trigger, the outer statement's conflict policy overrides the body's.)
SQLITE_BUMP = """
UPDATE nodepools_dataversion SET seq = seq + 1 WHERE cluster_id = {ref}.cluster_id;
INSERT INTO nodepools_dataversion (cluster_id, seq) SELECT {ref}.cluster_id, 1
 WHERE NOT EXISTS (SELECT 1 FROM nodepools_dataversion WHERE cluster_id = {ref}.cluster_id);"""

SQLITE_FORWARD = [
    sql
    for table in TABLES
    for sql in (
        f"CREATE TRIGGER {table}_data_insert AFTER INSERT ON {table} BEGIN" + SQLITE_BUMP.format(ref="NEW") + " END",
        f"CREATE TRIGGER {table}_data_delete AFTER DELETE ON {table} BEGIN" + SQLITE_BUMP.format(ref="OLD") + " END",
        f"CREATE TRIGGER {table}_data_update AFTER UPDATE ON {table} BEGIN" + SQLITE_BUMP.format(ref="NEW") + " END",
    )
]
SQLITE_BACKWARD = [f"DROP TRIGGER IF EXISTS {table}_data_{op}" for table in TABLES for op in ("insert", "delete", "update")]

# Statement triggers with transition tables: one raise per cluster a statement touched (a full list of 50,000 pods
# upserted by the sync's COPY raises it once); a statement that changed no row (an upsert whose values were all
# unchanged) raises nothing.
POSTGRES_FORWARD = ["""
CREATE OR REPLACE FUNCTION nodepools_data_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO nodepools_dataversion AS v (cluster_id, seq)
        SELECT DISTINCT cluster_id, 1 FROM changed
    ON CONFLICT (cluster_id) DO UPDATE SET seq = v.seq + 1;
    RETURN NULL;
END
$$"""] + [
    sql
    for table in TABLES
    for sql in (
        f"CREATE TRIGGER {table}_data_insert AFTER INSERT ON {table} REFERENCING NEW TABLE AS changed "
        "FOR EACH STATEMENT EXECUTE FUNCTION nodepools_data_changed()",
        f"CREATE TRIGGER {table}_data_delete AFTER DELETE ON {table} REFERENCING OLD TABLE AS changed "
        "FOR EACH STATEMENT EXECUTE FUNCTION nodepools_data_changed()",
        f"CREATE TRIGGER {table}_data_update AFTER UPDATE ON {table} REFERENCING NEW TABLE AS changed "
        "FOR EACH STATEMENT EXECUTE FUNCTION nodepools_data_changed()",
    )
]
POSTGRES_BACKWARD = [f"DROP TRIGGER IF EXISTS {table}_data_{op} ON {table}"
                     for table in TABLES for op in ("insert", "delete", "update")] + [
    "DROP FUNCTION IF EXISTS nodepools_data_changed()"]
