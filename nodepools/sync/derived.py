"""Derived node state: pool membership, status and not-ready reasons (docs/concepts.md#pools, #not-ready).

A node's pool follows from its labels and the cluster's pools (the first-created matching pool wins, the
others are listed as conflicts, no match: the default pool); its reasons from its conditions and cordon,
the NVIDIA operand pods ready on it and the pods still selecting another pool's label; its status from
the reasons (Unknown while the cluster is unreachable). The same rules are written twice, and the tests
(tests/nodepools/test_sync_derived.py) and bench/sync.py check that both give the same result:

- in Python (`DerivedNodes`): the mirror tells this index about every stored Node and Pod
  (`node_changed`, `pod_changed`, ...); it keeps per node what the rules need and the set of nodes whose
  derived state may have changed (`dirty`), so that a batch recomputes only those. Watch events (small
  batches), and every batch on SQLite, are derived this way;
- set-wise in SQL (`derive_nodes_sql`, PostgreSQL): on the bulk path, i.e. a batch of at least
  `copy_min_rows` rows (the first full list, relists) or as many dirty nodes (pools changed, the cluster
  became unreachable), one `UPDATE .. FROM` over the cluster's nodes computes membership, status and
  reasons from the stored labels, conditions and pods (jsonb operators, aggregates over the cluster's
  pods) once the batch's rows are stored, writes only the nodes whose derived values differ and returns
  them, so that the in-memory facts stay what the database holds. While a full list is still arriving
  (from a healthy informer) it waits for the list's end: it runs once per list rather than once per
  batch, and no node is judged on part of its pods (an operand pod on a later page is not missing).
  The statement reads every pod of the cluster once, keeping per node only the distinct ready operands
  and nodeSelectors of its active pods, and every node once.

A pod's links to its node and project are joins in the bulk upsert (`writer.LINKS`).
"""
from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import orjson
from django.db import connection

from common import caches
from nodepools import kube
from nodepools.models import Cluster, ConnectionState, Node, NodePool, NodeStatus, Pod


def pod_contribution(node_name: str, phase: str, ready: bool, labels: Any, selector: Any) -> tuple[str | None, tuple]:
    """(ready NVIDIA operand app, nodeSelector pairs) of an active pod; nothing for inactive pods."""
    if not node_name or phase in Pod.FINISHED_PHASES:
        return None, ()
    app = labels.get("app") if isinstance(labels, dict) else None
    operand = app if ready and app in kube.OPERANDS else None
    return operand, tuple(sorted(selector.items())) if selector else ()


class NodeFacts:
    __slots__ = ("labels", "is_gpu", "cond", "pool_id", "conflicts", "status", "reasons")

    def __init__(self, labels=None, is_gpu=False, cond=(), pool_id=None, conflicts=(), status=None, reasons=()):
        self.labels, self.is_gpu, self.cond = labels or {}, is_gpu, list(cond)
        self.pool_id, self.conflicts, self.status, self.reasons = pool_id, list(conflicts), status, list(reasons)

    def derived(self) -> tuple:
        return self.pool_id, self.conflicts, self.status, self.reasons


class DerivedNodes:
    """What each node's derived state depends on, and which nodes need it recomputed."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeFacts] = {}
        self.pods: dict[tuple[str, str], tuple[str, str | None, tuple]] = {}  # key -> (node, operand, selector)
        self.operands: dict[str, Counter] = {}
        self.selectors: dict[str, Counter] = {}
        self.pods_per_node: Counter = Counter()
        self.dirty: set[str] = set()
        self.unreachable = False
        self.default_pool_id: int | None = None
        self.pool_selectors: list[tuple[int, str, str]] = []
        self.pool_by_label: dict[tuple[str, str], int] = {}
        self.pool_names: dict[int, str] = {}

    # -- pools -------------------------------------------------------------------------------------
    def set_pools(self, rows: list[tuple]) -> None:
        """rows: (pk, name, is_default, label_key, label_value) in creation order."""
        self.default_pool_id = next((pk for pk, _, default, _, _ in rows if default), None)
        self.pool_selectors = [(pk, key, value) for pk, _, default, key, value in rows if not default]
        self.pool_by_label = {}
        for pk, key, value in self.pool_selectors:
            self.pool_by_label.setdefault((key, value), pk)
        self.pool_names = {pk: name for pk, name, *_ in rows}
        self.dirty.update(self.nodes)

    def set_unreachable(self, unreachable: bool) -> None:
        if unreachable != self.unreachable:
            self.unreachable = unreachable
            self.dirty.update(self.nodes)

    # -- nodes ---------------------------------------------------------------------------------------
    def node_loaded(self, name: str, labels, is_gpu, cond, pool_id, conflicts, status, reasons) -> None:
        self.nodes[name] = NodeFacts(labels, is_gpu, cond, pool_id, conflicts, status, reasons)

    def node_changed(self, name: str, facts: kube.NodeFacts) -> None:
        entry = self.nodes.get(name)
        if entry is None:
            entry = self.nodes[name] = NodeFacts()
        entry.labels, entry.is_gpu, entry.cond = facts.labels, facts.is_gpu_node, facts.condition_reasons
        self.dirty.add(name)

    def node_deleted(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.dirty.discard(name)

    # -- pods ----------------------------------------------------------------------------------------
    def _count(self, key, node: str, operand, selector, sign: int) -> None:
        if operand:
            counter = self.operands.setdefault(node, Counter())
            counter[operand] += sign
        if selector:
            counter = self.selectors.setdefault(node, Counter())
            for pair in selector:
                counter[pair] += sign
        if operand or selector:
            self.dirty.add(node)
        if node:
            self.pods_per_node[node] += sign

    def pod_changed(self, key, node_name: str, phase: str, ready: bool, labels, selector, mark: bool = True) -> None:
        old = self.pods.get(key)
        if old is not None:
            self._count(key, *old, -1)
        operand, pairs = pod_contribution(node_name, phase, ready, labels, selector)
        self.pods[key] = (node_name, operand, pairs)
        if mark:
            self._count(key, node_name, operand, pairs, 1)
        else:  # loading: nothing to recompute
            dirty = set(self.dirty)
            self._count(key, node_name, operand, pairs, 1)
            self.dirty = dirty

    def pod_deleted(self, key) -> None:
        old = self.pods.pop(key, None)
        if old is not None:
            self._count(key, *old, -1)

    # -- deriving ------------------------------------------------------------------------------------
    def derive(self, name: str, entry: NodeFacts) -> tuple[int | None, list[str], str, list[str]]:
        matched, conflicts = kube.resolve_pool(entry.labels, self.pool_selectors)
        pool_id = matched if matched is not None else self.default_pool_id
        conflict_names = [self.pool_names[pk] for pk in conflicts]
        operands = {app for app, n in (self.operands.get(name) or {}).items() if n > 0}
        reasons = list(entry.cond) + kube.missing_operand_reasons(entry.labels, entry.is_gpu, operands)
        for pair, n in (self.selectors.get(name) or {}).items():
            if n > 0:
                target = self.pool_by_label.get(pair)
                if target is not None and target != pool_id:
                    reasons.append(kube.NodeReason.UNDRAINED_MIGRATED)
                    break
        reasons = kube.sort_reasons(reasons)
        if self.unreachable:
            status = NodeStatus.UNKNOWN
        else:
            status = NodeStatus.NOT_READY if reasons else NodeStatus.READY
        return pool_id, conflict_names, str(status), reasons


# -- set-wise, in SQL (PostgreSQL) ---------------------------------------------------------------------

def _reason_sql() -> str:
    """The not-ready reasons of node `n` as a JSON array, in NodeReason.ORDER, from the flags computed
    by `_derive_sql` (c: conditions, o: ready operand apps, u: undrained)."""
    R = kube.NodeReason
    toolkit_label, _ = kube.OPERANDS[kube.TOOLKIT_APP]
    dcgm_label, _ = kube.OPERANDS[kube.DCGM_APP]
    flags = {
        R.NODE_UNREACHABLE: "c.unreachable",
        R.KUBELET_NOT_READY: "c.kubelet",
        **{reason: f"c.{ctype.lower()}" for ctype, reason in kube._PRESSURE_CONDITIONS.items()},
        R.SCHEDULING_DISABLED: "n.unschedulable",
        R.UNDRAINED_MIGRATED: "u.undrained",
        R.MISSING_TOOLKIT: (f"n.is_gpu_node AND n.labels -> '{toolkit_label}' IS DISTINCT FROM '\"false\"'::jsonb "
                            f"AND NOT (COALESCE(o.apps, '{{}}') @> ARRAY['{kube.TOOLKIT_APP}'])"),
        R.MISSING_DCGM: (f"n.is_gpu_node AND n.labels -> '{dcgm_label}' IS DISTINCT FROM '\"false\"'::jsonb "
                         f"AND NOT (COALESCE(o.apps, '{{}}') @> ARRAY['{kube.DCGM_APP}'])"),
    }
    flags = {reason: flags[reason] for reason in R.ORDER}  # KeyError: a reason the SQL does not detect
    assert list(flags) == R.ORDER
    items = ", ".join(f"CASE WHEN COALESCE({flag}, false) THEN '{reason}' END" for reason, flag in flags.items())
    return f"to_jsonb(array_remove(ARRAY[{items}]::text[], NULL))"


@caches.register
@functools.lru_cache(maxsize=4)
def _derive_sql(node_table: str, pool_table: str, pod_table: str) -> str:
    """One UPDATE .. FROM over a cluster's nodes: pool membership, status and reasons (the rules of
    `DerivedNodes.derive`), writing only rows whose derived values differ; RETURNING what it wrote.

    One pass over the cluster's pods (the active ones that can matter, aggregated per node name) and one
    over its nodes (membership against the few pools per node, conditions per node), hash-joined.
    Parameters: cluster, default_pool, unreachable, now."""
    finished = ", ".join(f"'{phase}'" for phase in Pod.FINISHED_PHASES)
    apps = ", ".join(f"'{app}'" for app in kube.OPERANDS)
    pressure_sql = "".join(f",\n               COALESCE(bool_or(e ->> 'type' = '{ctype}' AND e ->> 'status' = 'True'), false) "
                           f"AS {ctype.lower()}" for ctype in kube._PRESSURE_CONDITIONS)
    return f"""
WITH pools AS (
    -- the non-default pools in creation order (the first-created matching pool wins)
    SELECT id, name, label_key, to_jsonb(label_value) AS value, row_number() OVER (ORDER BY created, id) AS ord
    FROM {pool_table} WHERE cluster_id = %(cluster)s AND NOT is_default
), pool_by_label AS (
    SELECT DISTINCT ON (label_key, value) id, label_key, value FROM pools ORDER BY label_key, value, ord
), active AS (
    -- one pass over the cluster's pods: per node, the distinct ready NVIDIA operands and nodeSelectors of
    -- its active pods (pods of one node mostly share them, so this is small)
    SELECT DISTINCT node_name,
           CASE WHEN ready AND labels ->> 'app' IN ({apps}) THEN labels ->> 'app' END AS app,
           CASE WHEN node_selector <> '{{}}'::jsonb AND jsonb_typeof(node_selector) = 'object'
                THEN node_selector END AS selector
    FROM {pod_table}
    WHERE cluster_id = %(cluster)s AND node_name <> '' AND phase NOT IN ({finished})
      AND ((ready AND labels ->> 'app' IN ({apps})) OR node_selector <> '{{}}'::jsonb)
), operands AS (
    SELECT node_name, array_agg(DISTINCT app) AS apps FROM active WHERE app IS NOT NULL GROUP BY node_name
), selected AS (
    -- per node, the pools whose label an active pod on it still selects
    SELECT a.node_name, array_agg(DISTINCT p.id) AS pool_ids
    FROM (SELECT DISTINCT node_name, selector FROM active WHERE selector IS NOT NULL) a
    JOIN pool_by_label p ON a.selector -> p.label_key = p.value
    GROUP BY a.node_name
), placed AS (
    SELECT n.id, n.name, n.labels, n.conditions, n.unschedulable, n.is_gpu_node,
           COALESCE(m.pool_id, %(default_pool)s) AS pool_id, COALESCE(m.conflicts, '[]'::jsonb) AS conflicts
    FROM {node_table} n
    LEFT JOIN LATERAL (
        SELECT (array_agg(p.id ORDER BY p.ord))[1] AS pool_id,
               CASE WHEN count(*) > 1 THEN jsonb_agg(p.name ORDER BY p.ord) END AS conflicts
        FROM pools p WHERE n.labels -> p.label_key = p.value
    ) m ON true
    WHERE n.cluster_id = %(cluster)s
), derived AS (
    SELECT n.id, n.pool_id, n.conflicts, {_reason_sql()} AS reasons
    FROM placed n
    LEFT JOIN operands o ON o.node_name = n.name
    LEFT JOIN selected sel ON sel.node_name = n.name
    CROSS JOIN LATERAL (
        SELECT EXISTS (SELECT 1 FROM unnest(sel.pool_ids) target WHERE target IS DISTINCT FROM n.pool_id) AS undrained
    ) u
    CROSS JOIN LATERAL (
        SELECT NOT COALESCE(bool_or(e ->> 'type' = 'Ready'), false)
               OR COALESCE(bool_or(e ->> 'type' = 'Ready' AND (e ->> 'status') IS DISTINCT FROM 'True'
                                   AND (e ->> 'status') IS DISTINCT FROM 'False'), false) AS unreachable,
               COALESCE(bool_or(e ->> 'type' = 'Ready' AND e ->> 'status' = 'False'), false) AS kubelet{pressure_sql}
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(n.conditions) = 'array' THEN n.conditions
                                       ELSE '[]'::jsonb END) e
    ) c
), final AS (
    SELECT id, pool_id, conflicts, reasons,
           CASE WHEN %(unreachable)s THEN '{NodeStatus.UNKNOWN}'
                WHEN reasons = '[]'::jsonb THEN '{NodeStatus.READY}' ELSE '{NodeStatus.NOT_READY}' END AS status
    FROM derived
)
UPDATE {node_table} t
SET pool_id = f.pool_id, pool_conflicts = f.conflicts, status = f.status, status_reasons = f.reasons,
    updated = %(now)s
FROM final f
WHERE t.id = f.id AND (t.pool_id IS DISTINCT FROM f.pool_id OR t.pool_conflicts IS DISTINCT FROM f.conflicts
                       OR t.status IS DISTINCT FROM f.status OR t.status_reasons IS DISTINCT FROM f.reasons)
RETURNING t.name, t.pool_id, t.pool_conflicts, t.status, t.status_reasons
"""


def derive_nodes_sql(cluster_id: int, default_pool_id: int | None, unreachable: bool, now) -> list[tuple]:
    """Derive every node of the cluster set-wise in SQL (PostgreSQL) from the stored nodes, pods and
    pools; writes only the nodes whose derived state changed and returns those as
    (name, pool_id, conflicts, status, reasons)."""
    q = connection.ops.quote_name
    sql = _derive_sql(q(Node._meta.db_table), q(NodePool._meta.db_table), q(Pod._meta.db_table))
    with connection.cursor() as cursor:
        cursor.execute(sql, {"cluster": cluster_id, "default_pool": default_pool_id, "unreachable": unreachable,
                             "now": now})
        rows = cursor.fetchall()
    loads = orjson.loads
    return [(name, pool_id, loads(conflicts) if isinstance(conflicts, (str, bytes)) else conflicts, status,
             loads(reasons) if isinstance(reasons, (str, bytes)) else reasons)
            for name, pool_id, conflicts, status, reasons in rows]


def derive_from_database(cluster_id: int, names: list[str] | None = None) -> dict[str, tuple]:
    """The Python rules (`DerivedNodes.derive`) over what the database stores of a cluster: node name ->
    (pool_id, conflicts, status, reasons), for every node or only `names`. For checks (tests, bench):
    whatever path derived the stored state, it must equal this."""
    derived = DerivedNodes()
    derived.unreachable = Cluster.objects.filter(
        pk=cluster_id, connection_state=ConnectionState.UNREACHABLE).exists()
    derived.set_pools(list(NodePool.objects.filter(cluster_id=cluster_id).order_by("created", "pk").values_list(
        "pk", "name", "is_default", "label_key", "label_value")))
    nodes = Node.objects.filter(cluster_id=cluster_id)
    pods = Pod.objects.filter(cluster_id=cluster_id)
    if names is not None:
        nodes, pods = nodes.filter(name__in=names), pods.filter(node_name__in=names)
    for name, labels, is_gpu, conditions, unschedulable in nodes.values_list(
            "name", "labels", "is_gpu_node", "conditions", "unschedulable").iterator(chunk_size=2000):
        cond = kube.node_condition_reasons({"spec": {"unschedulable": unschedulable}, "status": {"conditions": conditions}})
        derived.node_loaded(name, labels, is_gpu, cond, None, [], None, [])
    for ns, name, node_name, phase, ready, app, selector in pods.values_list(
            "namespace", "name", "node_name", "phase", "ready", "labels__app", "node_selector").iterator(chunk_size=5000):
        derived.pod_changed((ns, name), node_name, phase, ready, {"app": app}, selector or {}, mark=False)
    return {name: derived.derive(name, facts) for name, facts in derived.nodes.items()}
