"""Writing a mirror's pending rows: upserts and deletions per registered resource.

Two paths with the same outcome:

- row by row (`executemany` of one prepared INSERT .. ON CONFLICT DO UPDATE): SQLite, and small
  batches (watch events) on PostgreSQL;
- bulk (PostgreSQL, from `copy_min_rows` rows, i.e. full lists): the rows are streamed with `COPY` into
  a temporary staging table (psycopg 3's `cursor.copy()`), then one `INSERT .. SELECT .. ON CONFLICT ..
  DO UPDATE .. WHERE (a stored value differs)` moves them, computing the links set-wise in SQL (a pod's
  node and project are joins, not per-row lookups), and deletions are one statement over arrays.

Every stored-value column is compared in the upsert's WHERE, so a row whose values did not change is
never rewritten even if the caller sent it.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

import orjson
from django.db import connection
from django.db.models import OuterRef, Q, Subquery

from nodepools.models import Node, Pod, project_namespace_model
from nodepools.sync.resources import PODS, Resource, when

# Columns a resource writes beyond its key and `fields`, with the SQL that computes them from the staging
# row `s` on the bulk path (None: the value comes from the caller, also on the bulk path).
LINKS: dict[str, list[tuple[str, str | None]]] = {
    "nodes": [("pool_id", None), ("pool_conflicts", None), ("status", None), ("status_reasons", None)],
    "pods": [
        ("node_id", "(SELECT n.id FROM nodepools_node n WHERE n.cluster_id = s.cluster_id AND n.name = s.node_name)"),
        # {namespaces}: the table of the namespaces projects own (nodepools.models.project_namespace_model).
        ("project_id", "(SELECT pn.project_id FROM {namespaces} pn WHERE pn.cluster_id = s.cluster_id "
                       "AND pn.name = s.namespace)"),
    ],
}
JSON_LINKS = {"pool_conflicts", "status_reasons"}


class TableWriter:
    """Upserts and deletes one resource's rows of one cluster."""

    def __init__(self, resource: Resource, cluster_id: int, copy_min_rows: int = 1000) -> None:
        self.resource, self.cid, self.copy_min_rows = resource, cluster_id, copy_min_rows
        opts = resource.model._meta
        self.table = opts.db_table
        self.key_columns = ["cluster_id", *resource.key_fields]
        self.value_columns = [opts.get_field(f).column for f in resource.fields]

        table = connection.ops.quote_name(project_namespace_model()._meta.db_table)
        self.links = [(column, sql.format(namespaces=table) if sql else sql) for column, sql in LINKS.get(resource.name, [])]
        self.link_columns = [column for column, _ in self.links]
        self.columns = self.key_columns + self.value_columns + self.link_columns + ["updated"]
        self.json_columns = {opts.get_field(f).column for f in resource.json_fields} | (JSON_LINKS & set(self.link_columns))
        self.datetime_columns = {opts.get_field(f).column for f in resource.datetime_fields}
        self.postgres = connection.vendor == "postgresql"
        self.adapt_field = {opts.get_field(f).column: opts.get_field(f) for f in resource.fields
                            if opts.get_field(f).get_internal_type() == "DecimalField"}
        self.copies = 0  # upserts that went through COPY (the bulk path)

    # -- SQL ---------------------------------------------------------------------------------------
    def _q(self, name: str) -> str:
        return connection.ops.quote_name(name)

    def _compared(self) -> list[str]:
        """Columns whose change makes a row worth writing (not resourceVersion, not `updated`)."""
        return [c for c in self.value_columns + self.link_columns if c != "resource_version"]

    def _upsert_tail(self, target: str) -> str:
        q = self._q
        updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in self.columns if c not in self.key_columns)
        if self.postgres:
            differs = " OR ".join(f"{target}.{q(c)} IS DISTINCT FROM EXCLUDED.{q(c)}" for c in self._compared())
        else:
            differs = " OR ".join(f"{target}.{q(c)} IS NOT EXCLUDED.{q(c)}" for c in self._compared())
        return (f" ON CONFLICT ({', '.join(q(c) for c in self.key_columns)}) DO UPDATE SET {updates}"
                f" WHERE {differs}")

    # -- rows ----------------------------------------------------------------------------------------
    def rows(self, items: Iterable[tuple[Any, list, tuple]], now: datetime) -> list[tuple]:
        """(key, values, link values) -> database rows in `columns` order (JSON as text)."""
        dumps = orjson.dumps
        json_at = [i for i, c in enumerate(self.value_columns) if c in self.json_columns]
        dt_at = [i for i, c in enumerate(self.value_columns) if c in self.datetime_columns]
        link_json_at = [i for i, c in enumerate(self.link_columns) if c in self.json_columns]
        decimal_at = [(i, f) for i, c in enumerate(self.value_columns) if c in self.adapt_field
                      for f in [self.adapt_field[c]]]
        stamp = now if self.postgres else connection.ops.adapt_datetimefield_value(now)
        dates: dict = {}
        out = []
        cid = self.cid
        namespaced = self.resource.namespaced
        for key, values, links in items:
            values = list(values)
            for i in json_at:
                values[i] = dumps(values[i]).decode()
            for i in dt_at:
                text = values[i]
                try:
                    values[i] = dates[text]
                except KeyError:
                    value = when(text)
                    if not self.postgres and value is not None:
                        value = connection.ops.adapt_datetimefield_value(value)
                    values[i] = dates[text] = value
            if not self.postgres:
                for i, f in decimal_at:
                    values[i] = connection.ops.adapt_decimalfield_value(values[i], f.max_digits, f.decimal_places)
            links = list(links)
            for i in link_json_at:
                links[i] = dumps(links[i]).decode()
            head = (cid, *key) if namespaced else (cid, key)
            out.append((*head, *values, *links, stamp))
        return out

    # -- writing -------------------------------------------------------------------------------------
    def upsert(self, items: list[tuple[Any, list, tuple]], now: datetime) -> int:
        """Insert or update these (key, values, links); returns how many rows were sent."""
        if not items:
            return 0
        if self.postgres and len(items) >= self.copy_min_rows:
            self._upsert_copy(items, now)
            self.copies += 1
        else:
            self._upsert_rows(self.rows(items, now))
        return len(items)

    def _upsert_rows(self, rows: list[tuple]) -> None:
        q = self._q
        cast = {c: "::jsonb" for c in self.json_columns} if self.postgres else {}
        placeholders = ", ".join("%s" + cast.get(c, "") for c in self.columns)
        sql = (f"INSERT INTO {q(self.table)} AS t ({', '.join(q(c) for c in self.columns)}) VALUES ({placeholders})"
               + self._upsert_tail("t"))
        with connection.cursor() as cursor:
            for i in range(0, len(rows), 1000):
                cursor.executemany(sql, rows[i:i + 1000])

    def _upsert_copy(self, items: list[tuple[Any, list, tuple]], now: datetime) -> None:
        q = self._q
        staging = f"sync_stage_{self.resource.name}"
        # Links computed in SQL are not sent: the staging table has only the columns the caller gives.
        sent = [c for c in self.columns if c not in {col for col, sql in self.links if sql}]
        link_sql = {col: sql for col, sql in self.links if sql}
        sent_idx = [self.columns.index(c) for c in sent]
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {staging} ON COMMIT DELETE ROWS AS "
                f"SELECT {', '.join(q(c) for c in sent)} FROM {q(self.table)} WITH NO DATA")
            raw = cursor.cursor  # psycopg's own cursor: COPY
            with raw.copy(f"COPY {staging} ({', '.join(q(c) for c in sent)}) FROM STDIN") as copy:
                for row in self.rows(items, now):
                    copy.write_row([row[i] for i in sent_idx])
            select = ", ".join(link_sql.get(c) or f"s.{q(c)}" for c in self.columns)
            cursor.execute(
                f"INSERT INTO {q(self.table)} AS t ({', '.join(q(c) for c in self.columns)}) "
                f"SELECT {select} FROM {staging} s" + self._upsert_tail("t"))
            cursor.execute(f"TRUNCATE {staging}")

    def delete(self, keys: list, now: datetime | None = None) -> int:
        if not keys:
            return 0
        if self.resource.retire is not None:
            # Rows kept after their object is gone (marked by the resource's own function).
            from django.utils import timezone

            self.resource.retire(self.cid, keys, now or timezone.now())
            return len(keys)
        model = self.resource.model
        if model._meta.related_objects:
            # Rows other rows point to (a pod's node): the ORM applies their on_delete (SET_NULL).
            field = "name"
            for i in range(0, len(keys), 500):
                if self.resource.namespaced:
                    condition = Q()
                    for ns, name in keys[i:i + 500]:
                        condition |= Q(namespace=ns, name=name)
                    model.objects.filter(condition, cluster_id=self.cid).delete()
                else:
                    model.objects.filter(cluster_id=self.cid, **{f"{field}__in": keys[i:i + 500]}).delete()
            return len(keys)
        q = self._q
        table = q(self.table)
        with connection.cursor() as cursor:
            if self.resource.namespaced:
                if self.postgres:
                    for i in range(0, len(keys), 20000):
                        chunk = keys[i:i + 20000]
                        cursor.execute(
                            f"DELETE FROM {table} WHERE cluster_id = %s AND (namespace, name) IN "
                            f"(SELECT * FROM unnest(%s::text[], %s::text[]))",
                            [self.cid, [k[0] for k in chunk], [k[1] for k in chunk]])
                else:
                    cursor.executemany(f"DELETE FROM {table} WHERE cluster_id = %s AND namespace = %s AND name = %s",
                                       [(self.cid, ns, name) for ns, name in keys])
            else:
                for i in range(0, len(keys), 500):
                    chunk = keys[i:i + 500]
                    if self.postgres:
                        cursor.execute(f"DELETE FROM {table} WHERE cluster_id = %s AND name = ANY(%s)", [self.cid, chunk])
                    else:
                        cursor.execute(f"DELETE FROM {table} WHERE cluster_id = %s AND name IN ({', '.join(['%s'] * len(chunk))})",
                                       [self.cid, *chunk])
        return len(keys)

    def pks(self) -> dict:
        """key -> row id of every row of this cluster."""
        key = ", ".join(self._q(c) for c in self.resource.key_fields)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, {key} FROM {self._q(self.table)} WHERE cluster_id = %s", [self.cid])
            if self.resource.namespaced:
                return {(ns, name): pk for pk, ns, name in cursor.fetchall()}
            return {name: pk for pk, name in cursor.fetchall()}


def update_node_derived(rows: list[tuple[int, Any, list, str, list]], now: datetime) -> int:
    """Only the derived columns of existing nodes: (pk, pool_id, conflicts, status, reasons)."""
    if not rows:
        return 0

    q = connection.ops.quote_name
    jsonb = "::jsonb" if connection.vendor == "postgresql" else ""
    stamp = now if connection.vendor == "postgresql" else connection.ops.adapt_datetimefield_value(now)
    sql = (f"UPDATE {q(Node._meta.db_table)} SET pool_id = %s, pool_conflicts = %s{jsonb}, status = %s, "
           f"status_reasons = %s{jsonb}, updated = %s WHERE id = %s")
    dumps = orjson.dumps
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(pool, dumps(conflicts).decode(), status, dumps(reasons).decode(), stamp, pk)
                                 for pk, pool, conflicts, status, reasons in rows])
    return len(rows)


def link_orphan_pods(cluster_id: int, node_names: list[str]) -> None:
    """Pods already stored whose node row is new (the pods' list came first): link them, set-wise."""
    for i in range(0, len(node_names), 1000):
        chunk = node_names[i:i + 1000]
        Pod.objects.filter(cluster_id=cluster_id, node_name__in=chunk, node__isnull=True).update(
            node=Subquery(Node.objects.filter(cluster_id=cluster_id, name=OuterRef("node_name")).values("pk")[:1]))


def relink_projects(cluster_id: int) -> None:
    """Every pod's project again from its namespace (after a project's namespaces changed)."""
    Pod.objects.filter(cluster_id=cluster_id).update(project=Subquery(
        project_namespace_model().objects.filter(cluster_id=cluster_id, name=OuterRef("namespace")).values("project")[:1]))


__all__ = ["TableWriter", "update_node_derived", "link_orphan_pods", "relink_projects", "PODS"]
