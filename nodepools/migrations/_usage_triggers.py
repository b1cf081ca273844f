"""The SQL of the node usage triggers (migration 0012_node_usage; made again by 0013 on SQLite, whose table
rebuild drops them). Kept apart so that later migrations use the same text."""

COUNTED = "('Succeeded', 'Failed')"

SQLITE_RECOUNT = """
UPDATE nodepools_node SET (usage_gpus, usage_cpu_millis, usage_memory_bytes, usage_pods) = (
    SELECT COALESCE(SUM(p.gpus), 0), COALESCE(SUM(p.cpu_millis), 0), COALESCE(SUM(p.memory_bytes), 0), COUNT(*)
    FROM nodepools_pod p WHERE p.node_id = {ref}.node_id AND p.phase NOT IN """ + COUNTED + """)
WHERE id = {ref}.node_id;"""

SQLITE_FORWARD = [
    "CREATE TRIGGER nodepools_pod_usage_insert AFTER INSERT ON nodepools_pod WHEN NEW.node_id IS NOT NULL BEGIN"
    + SQLITE_RECOUNT.format(ref="NEW") + " END",
    "CREATE TRIGGER nodepools_pod_usage_delete AFTER DELETE ON nodepools_pod WHEN OLD.node_id IS NOT NULL BEGIN"
    + SQLITE_RECOUNT.format(ref="OLD") + " END",
    "CREATE TRIGGER nodepools_pod_usage_update AFTER UPDATE OF node_id, phase, gpus, cpu_millis, memory_bytes "
    "ON nodepools_pod WHEN (OLD.node_id IS NOT NEW.node_id OR OLD.phase IS NOT NEW.phase OR OLD.gpus IS NOT NEW.gpus "
    "OR OLD.cpu_millis IS NOT NEW.cpu_millis OR OLD.memory_bytes IS NOT NEW.memory_bytes) BEGIN"
    + SQLITE_RECOUNT.format(ref="OLD") + SQLITE_RECOUNT.format(ref="NEW") + " END",
]
SQLITE_BACKWARD = ["DROP TRIGGER IF EXISTS nodepools_pod_usage_insert", "DROP TRIGGER IF EXISTS nodepools_pod_usage_delete",
                   "DROP TRIGGER IF EXISTS nodepools_pod_usage_update"]

POSTGRES_FORWARD = ["""
CREATE OR REPLACE FUNCTION nodepools_node_usage_recount(ids bigint[]) RETURNS void LANGUAGE sql AS $$
    UPDATE nodepools_node n
       SET usage_gpus = u.g, usage_cpu_millis = u.c, usage_memory_bytes = u.m, usage_pods = u.k
      FROM (SELECT x.id, COALESCE(SUM(p.gpus), 0) AS g, COALESCE(SUM(p.cpu_millis), 0) AS c,
                   COALESCE(SUM(p.memory_bytes), 0) AS m, COUNT(p.id) AS k
              FROM unnest(ids) AS x(id)
              LEFT JOIN nodepools_pod p ON p.node_id = x.id AND p.phase NOT IN """ + COUNTED + """
             GROUP BY x.id) u
     WHERE n.id = u.id
       AND (n.usage_gpus, n.usage_cpu_millis, n.usage_memory_bytes, n.usage_pods) IS DISTINCT FROM (u.g, u.c, u.m, u.k)
$$""", """
CREATE OR REPLACE FUNCTION nodepools_pod_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM nodepools_node_usage_recount(ARRAY(SELECT DISTINCT node_id FROM pod_new WHERE node_id IS NOT NULL));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM nodepools_node_usage_recount(ARRAY(SELECT DISTINCT node_id FROM pod_old WHERE node_id IS NOT NULL));
    ELSE
        PERFORM nodepools_node_usage_recount(ARRAY(
            SELECT node_id FROM pod_old WHERE node_id IS NOT NULL
            UNION SELECT node_id FROM pod_new WHERE node_id IS NOT NULL));
    END IF;
    RETURN NULL;
END
$$""",
    "CREATE TRIGGER nodepools_pod_usage_insert AFTER INSERT ON nodepools_pod REFERENCING NEW TABLE AS pod_new "
    "FOR EACH STATEMENT EXECUTE FUNCTION nodepools_pod_usage()",
    "CREATE TRIGGER nodepools_pod_usage_delete AFTER DELETE ON nodepools_pod REFERENCING OLD TABLE AS pod_old "
    "FOR EACH STATEMENT EXECUTE FUNCTION nodepools_pod_usage()",
    "CREATE TRIGGER nodepools_pod_usage_update AFTER UPDATE ON nodepools_pod REFERENCING OLD TABLE AS pod_old "
    "NEW TABLE AS pod_new FOR EACH STATEMENT EXECUTE FUNCTION nodepools_pod_usage()",
]
POSTGRES_BACKWARD = [
    "DROP TRIGGER IF EXISTS nodepools_pod_usage_insert ON nodepools_pod",
    "DROP TRIGGER IF EXISTS nodepools_pod_usage_delete ON nodepools_pod",
    "DROP TRIGGER IF EXISTS nodepools_pod_usage_update ON nodepools_pod",
    "DROP FUNCTION IF EXISTS nodepools_pod_usage()",
    "DROP FUNCTION IF EXISTS nodepools_node_usage_recount(bigint[])",
]

BACKFILL = """
UPDATE nodepools_node SET usage_gpus = COALESCE((SELECT SUM(p.gpus) FROM nodepools_pod p WHERE p.node_id = nodepools_node.id
                                                  AND p.phase NOT IN """ + COUNTED + """), 0),
    usage_cpu_millis = COALESCE((SELECT SUM(p.cpu_millis) FROM nodepools_pod p WHERE p.node_id = nodepools_node.id
                                 AND p.phase NOT IN """ + COUNTED + """), 0),
    usage_memory_bytes = COALESCE((SELECT SUM(p.memory_bytes) FROM nodepools_pod p WHERE p.node_id = nodepools_node.id
                                   AND p.phase NOT IN """ + COUNTED + """), 0),
    usage_pods = (SELECT COUNT(*) FROM nodepools_pod p WHERE p.node_id = nodepools_node.id
                  AND p.phase NOT IN """ + COUNTED + """)"""


# The steps a migration that rebuilds the pods' or the nodes' table on SQLite runs around it (a stored generated
# column is added that way, and the rebuild drops the pods' triggers): the triggers go first and are made again
# after. PostgreSQL alters its tables in place and keeps them.

def sqlite_triggers_away(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        from nodepools.migrations import _data_triggers
        for sql in SQLITE_BACKWARD + _data_triggers.SQLITE_BACKWARD:
            schema_editor.execute(sql)


def sqlite_triggers_again(apps, schema_editor):
    """The pods' usage triggers made again, and (once migration 0021 made its table) the data-version triggers of
    the pods and the nodes (a rebuild of either table drops its own)."""
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_BACKWARD + SQLITE_FORWARD:
            schema_editor.execute(sql)
        if "nodepools_dataversion" in schema_editor.connection.introspection.table_names():
            from nodepools.migrations import _data_triggers
            for sql in _data_triggers.SQLITE_BACKWARD + _data_triggers.SQLITE_FORWARD:
                schema_editor.execute(sql)
