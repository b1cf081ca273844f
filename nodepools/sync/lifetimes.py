"""Pods' lifetimes (`PodLifetime`): what the GPU-hours ledger integrates, written with the mirror's batches.

Set-wise SQL from the rows just written, the same on SQLite and PostgreSQL:

- `lifetimes_upsert(cluster_id, now, keys=None)`: one row per bound pod (keyed by uid; a pod without a
  uid — objects built by hand — by "namespace/name"), from the pod's row (its GPUs, and the unit they are
  billed in: whole GPUs, slices of a MIG profile, replicas, fractions) and its node's (pool, GPU model): started when bound, ended when Succeeded or Failed. Once ended, a lifetime stays ended; a row
  is rewritten only when something the ledger counts changed (then `changed` moves). `keys`: only
  these pods (a watch batch); None: every pod of the cluster (the end of a full list).
- `lifetimes_end(cluster_id, ends, now)`: pods deleted (the DELETED event), replaced by a pod of the same
  name, or found gone by a list: their lifetime ends then, unless it already has.

Times are whole seconds (Kubernetes' timestamps are): the ledger counts to the second.
"""
from __future__ import annotations

import datetime
from typing import Iterable

from django.db import connection

from nodepools.kube import FINISHED_PHASES
from nodepools.models import Node, Pod, PodLifetime

_CHUNK = 500


def whole_second(moment: datetime.datetime) -> datetime.datetime:
    return moment.replace(microsecond=0)


def _tables() -> dict[str, str]:
    q = connection.ops.quote_name
    return {"life": q(PodLifetime._meta.db_table), "pod": q(Pod._meta.db_table), "node": q(Node._meta.db_table)}


def _stamp(moment: datetime.datetime):
    return moment if connection.vendor == "postgresql" else connection.ops.adapt_datetimefield_value(moment)


_PHASES = ", ".join(f"'{p}'" for p in FINISHED_PHASES)
_KEY = "COALESCE(NULLIF(p.uid, ''), p.namespace || '/' || p.name)"


def _upsert_sql(condition: str) -> str:
    t = _tables()
    return (
        f"INSERT INTO {t['life']} AS t (cluster_id, uid, namespace, name, node_name, pool_id, gpu_model, gpus, gpu_unit, gpu_units, "
        f"cpu_millis, memory_bytes, priority, started, ended, end_reason, recorded, changed) "
        f"SELECT p.cluster_id, {_KEY}, p.namespace, p.name, p.node_name, n.pool_id, COALESCE(n.gpu_product, ''), "
        f"p.gpus, p.gpu_unit, p.gpu_units, p.cpu_millis, p.memory_bytes, p.priority, COALESCE(p.started_in_cluster, p.created_in_cluster, %s), "
        f"CASE WHEN p.phase IN ({_PHASES}) THEN COALESCE(p.finished_in_cluster, %s) END, "
        f"CASE WHEN p.phase IN ({_PHASES}) THEN 'finished' ELSE '' END, %s, %s "
        f"FROM {t['pod']} p LEFT JOIN {t['node']} n ON n.id = p.node_id "
        f"WHERE p.cluster_id = %s AND p.node_name <> '' {condition} "
        "ON CONFLICT (cluster_id, uid) DO UPDATE SET "
        "ended = COALESCE(t.ended, EXCLUDED.ended), "
        "end_reason = CASE WHEN t.ended IS NULL THEN EXCLUDED.end_reason ELSE t.end_reason END, "
        "pool_id = COALESCE(t.pool_id, EXCLUDED.pool_id), "
        "gpu_model = CASE WHEN t.gpu_model = '' THEN EXCLUDED.gpu_model ELSE t.gpu_model END, "
        "node_name = EXCLUDED.node_name, gpus = EXCLUDED.gpus, gpu_unit = EXCLUDED.gpu_unit, "
        "gpu_units = EXCLUDED.gpu_units, cpu_millis = EXCLUDED.cpu_millis, "
        "memory_bytes = EXCLUDED.memory_bytes, priority = EXCLUDED.priority, changed = EXCLUDED.changed "
        "WHERE (t.ended IS NULL AND EXCLUDED.ended IS NOT NULL) OR (t.pool_id IS NULL AND EXCLUDED.pool_id IS NOT NULL) "
        "OR (t.gpu_model = '' AND EXCLUDED.gpu_model <> '') OR t.gpus <> EXCLUDED.gpus "
        "OR t.gpu_unit <> EXCLUDED.gpu_unit OR t.gpu_units <> EXCLUDED.gpu_units "
        "OR t.cpu_millis <> EXCLUDED.cpu_millis OR t.memory_bytes <> EXCLUDED.memory_bytes "
        "OR t.priority <> EXCLUDED.priority"
    )


def lifetimes_upsert(cluster_id: int, now: datetime.datetime, keys: Iterable[tuple[str, str]] | None = None) -> None:
    """Lifetimes of the bound pods of the cluster (`keys`: only these (namespace, name))."""
    now = _stamp(whole_second(now))
    head = [now, now, now, now, cluster_id]
    with connection.cursor() as cursor:
        if keys is None:
            cursor.execute(_upsert_sql(""), head)
            return
        keys = list(keys)
        postgres = connection.vendor == "postgresql"
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i:i + _CHUNK]
            if postgres:
                condition = "AND (p.namespace, p.name) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
                cursor.execute(_upsert_sql(condition), head + [[k[0] for k in chunk], [k[1] for k in chunk]])
            else:
                values = ", ".join(["(%s, %s)"] * len(chunk))
                condition = f"AND (p.namespace, p.name) IN (VALUES {values})"
                cursor.execute(_upsert_sql(condition), head + [v for key in chunk for v in key])


def lifetimes_end(cluster_id: int, ends: dict[str, tuple[datetime.datetime, str]], now: datetime.datetime) -> None:
    """{lifetime uid: (ended, reason)}: end those still counting."""
    if not ends:
        return
    t = _tables()
    now = _stamp(whole_second(now))
    rows = [(_stamp(whole_second(ended)), reason, now, cluster_id, uid) for uid, (ended, reason) in ends.items()]
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {t['life']} SET ended = CASE WHEN %s < started THEN started ELSE %s END, end_reason = %s, "
            f"changed = %s WHERE cluster_id = %s AND uid = %s AND ended IS NULL",
            [(ended, ended, reason, stamp, cid, uid) for ended, reason, stamp, cid, uid in rows])


def lifetime_key(uid: str, namespace: str, name: str) -> str:
    """A lifetime's key: the pod's uid, or "namespace/name" for a pod without one (as `lifetimes_upsert`)."""
    return uid or f"{namespace}/{name}"


__all__ = ["lifetimes_upsert", "lifetimes_end", "lifetime_key", "whole_second"]
