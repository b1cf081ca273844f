"""The order in which a cluster's writers lock: who writes a cluster's nodes or pods in a transaction on
PostgreSQL takes the cluster's data-version row first (`lock`), before any node or pod row. The database's
triggers raise that row at each such write (nodepools.models.DataVersion); a writer that took node rows first
and then waited on it, while another held it and waited on those nodes, would deadlock. SQLite runs one writer
at a time: nothing to lock."""
from __future__ import annotations

from django.db import connection


def lock(cluster_id: int) -> None:
    """Inside a transaction: take the cluster's data-version row (made if missing) until the transaction ends."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO nodepools_dataversion (cluster_id, seq) VALUES (%s, 0) ON CONFLICT DO NOTHING",
                       [cluster_id])
        cursor.execute("SELECT seq FROM nodepools_dataversion WHERE cluster_id = %s FOR UPDATE", [cluster_id])
