"""Derived node state: pool membership, status and not-ready reasons (DOMAIN.md §2-3).

A node's pool follows from its labels and the cluster's pools; its reasons from its conditions and
cordon, the NVIDIA operand pods ready on it and the pods still selecting another pool's label. The
mirror tells this index about every stored Node and Pod (`node_changed`, `pod_changed`, ...); it keeps
per node what those rules need and the set of nodes whose derived state may have changed (`dirty`), so
that a batch recomputes only those. This stays in Python: profiled (py-spy) on a 5,000-node /
150,000-pod first sync, deriving the nodes is under 1 % of the writer's samples and the per-pod counts
it needs about 6 %, while a pod's links to its node and project
are joins in the bulk upsert (`writer.LINKS`).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from nodepools import kube
from nodepools.models import NodeStatus, Pod


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
