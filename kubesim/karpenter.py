"""A stand-in for Karpenter's provisioner (``karpenter.sh/v1``): NodePools turn pending pods into nodes.

Like :mod:`kubesim.schedulers` for KAI and Kueue, only what a console can observe is emulated, from the
objects in the store, one :meth:`KarpenterMixin.karpenter_step` at a time (the chaos loop calls it; tests
call it with their own clock):

- a pending pod that no Ready node fits (node selector, required node affinity, taints, free GPUs, CPU,
  memory) and that no NodeClaim in flight can take is *nominated* for a new NodeClaim of the first
  NodePool (``weight`` highest, then name) whose requirements, template labels and taints admit it and
  whose ``limits`` leave room for the cheapest offering (instance type × zone × capacity type of a small
  AWS-like catalog) that fits it; an Event ``Nominated`` ("Pod should schedule on: nodeclaim/<name>") is
  recorded for the pod, as Karpenter does;
- a NodeClaim is ``Launched`` (``status.providerID``, ``capacity``, ``allocatable``, ``imageID``) after
  :attr:`KarpenterMixin.karpenter_seconds` [0], ``Registered`` after [1] (the Node appears, labelled
  ``karpenter.sh/nodepool``, ``karpenter.sh/capacity-type``, instance type, zone, the instance's
  ``karpenter.k8s.aws/*`` labels and the GPU feature discovery labels, with its template and startup
  taints; ``status.nodeName``) and ``Initialized`` / ``Ready`` after [2] (startup taints removed); the pods
  nominated for it are then bound to the node, as kube-scheduler would;
- a Node of a NodeClaim that stays empty (no pod but daemon pods) for ``consolidateAfter`` (at least
  :attr:`KarpenterMixin.karpenter_empty_seconds`) is consolidated: NodeClaim and Node are deleted;
  a NodeClaim whose Node was deleted goes too;
- every NodePool's ``status.resources`` (cpu, memory, nvidia.com/gpu, nodes: what its NodeClaims, and
  its nodes without one, provide) and ``status.nodes`` and conditions (Ready, ValidationSucceeded,
  NodeClassReady) are kept up to date.

Node selectors, node affinity, taints and a pod's requests are judged by Kubernetes' rules (``kube.labels``,
``kube.taints``, ``kube.requests``); a pod, Node or NodePool whose quantity is none is left out and
reported (``kubesim.reports``).
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kube import requests as kube_requests
from kube.labels import pod_matches_node, requirement_matches
from kube.quantity import QuantityError, parse_quantity, plain_quantity
from kube.taints import first_untolerated_taint
from kubesim.factories import _GPU_PRODUCTS, make_node
from kubesim.reports import unreadable
from kubesim.resources import NODES, PODS
from kubesim.util import Obj
from kube import gpu as kgpu

NODEPOOLS = "nodepools.karpenter.sh"
NODECLAIMS = "nodeclaims.karpenter.sh"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
GPU = kgpu.GPU_RESOURCE
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
CAPACITY_TYPES = ("spot", "on-demand", "reserved")  # cheapest first; reserved only where required

# name, family, GPU name, GPU product, GPUs, vCPUs, memory, architecture
INSTANCE_TYPES: tuple[tuple[str, str, str, str, int, int, str, str], ...] = (
    ("m7i.4xlarge", "m7i", "", "", 0, 16, "64Gi", "amd64"),
    ("m7g.4xlarge", "m7g", "", "", 0, 16, "64Gi", "arm64"),
    ("g4dn.xlarge", "g4dn", "t4", "Tesla-T4", 1, 4, "16Gi", "amd64"),
    ("g4dn.12xlarge", "g4dn", "t4", "Tesla-T4", 4, 48, "192Gi", "amd64"),
    ("g5.xlarge", "g5", "a10g", "NVIDIA-A10G", 1, 4, "16Gi", "amd64"),
    ("g5.12xlarge", "g5", "a10g", "NVIDIA-A10G", 4, 48, "192Gi", "amd64"),
    ("g6.xlarge", "g6", "l4", "NVIDIA-L4", 1, 4, "16Gi", "amd64"),
    ("g6.12xlarge", "g6", "l4", "NVIDIA-L4", 4, 48, "192Gi", "amd64"),
    ("p4d.24xlarge", "p4d", "a100", "NVIDIA-A100-SXM4-40GB", 8, 96, "1152Gi", "amd64"),
    ("p4de.24xlarge", "p4de", "a100", "NVIDIA-A100-SXM4-80GB", 8, 96, "1152Gi", "amd64"),
    ("p5.48xlarge", "p5", "h100", "NVIDIA-H100-80GB-HBM3", 8, 192, "2048Gi", "amd64"),
)
_DAEMON_APPS = ("nvidia-container-toolkit-daemonset", "nvidia-dcgm-exporter")


def instance_labels(itype: tuple[str, str, str, str, int, int, str, str]) -> dict[str, str]:
    name, family, gpu_name, product, gpus, cpu, memory, arch = itype
    labels = {
        "node.kubernetes.io/instance-type": name, "kubernetes.io/arch": arch, "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-family": family, "karpenter.k8s.aws/instance-category": family[0],
        "karpenter.k8s.aws/instance-cpu": str(cpu),
        "karpenter.k8s.aws/instance-memory": str(int(parse_quantity(memory) / 2**20)),
    }
    if gpus:
        labels.update({"karpenter.k8s.aws/instance-gpu-name": gpu_name, "karpenter.k8s.aws/instance-gpu-count": str(gpus),
                       "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                       "karpenter.k8s.aws/instance-gpu-memory": str(_GPU_PRODUCTS.get(product, (0, ""))[0])})
    return labels


def pod_admits_labels(pod: Obj, labels: Mapping[str, str]) -> bool:
    """The pod's nodeSelector and required node affinity admit a node with these labels (kube.labels)."""
    return pod_matches_node(pod, {"metadata": {"labels": labels}})


def tolerated(pod: Obj, taints: Iterable[Mapping[str, Any]]) -> bool:
    """The pod tolerates every NoSchedule/NoExecute taint (kube.taints)."""
    return first_untolerated_taint(taints, (pod.get("spec") or {}).get("tolerations")) is None


def _capacity(itype) -> dict[str, Decimal]:
    return {"cpu": Decimal(itype[5]), "memory": parse_quantity(itype[6]), GPU: Decimal(itype[4])}


def _fits(asks: Mapping[str, Decimal], room: Mapping[str, Decimal]) -> bool:
    return all(asks.get(k, Decimal(0)) <= room.get(k, Decimal(0)) for k in (GPU, "cpu", "memory"))


def _conditions(ts: str, *pairs: tuple[str, str, str]) -> list[Obj]:
    return [{"type": t, "status": s, "reason": r, "message": "", "lastTransitionTime": ts} for t, s, r in pairs]


def _set_condition(obj: Obj, ctype: str, status: str, reason: str, ts: str) -> None:
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conditions:
        if c.get("type") == ctype:
            if c.get("status") != status:
                c.update(status=status, reason=reason, lastTransitionTime=ts)
            return
    conditions.append({"type": ctype, "status": status, "reason": reason, "message": "", "lastTransitionTime": ts})


def _has(obj: Obj, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class KarpenterMixin:
    """Part of :class:`kubesim.KubeEmulator`: Karpenter's provisioning and consolidation, stepwise."""

    #: Seconds after its creation a NodeClaim is Launched, Registered, Initialized.
    karpenter_seconds = (1.0, 3.0, 5.0)
    #: A NodeClaim's node empty this long (or its pool's consolidateAfter, if longer) is consolidated.
    karpenter_empty_seconds = 60.0

    def _karpenter_state(self) -> dict[str, Any]:
        state = getattr(self, "_karpenter", None)
        if state is None:
            state = self._karpenter = {"born": {}, "nominated": {}, "empty_since": {}, "serial": 0}
        return state

    def karpenter_step(self) -> list[str]:
        """Provision, progress and consolidate as Karpenter would now (the emulator's clock); returns what
        happened. Does nothing (and reads nothing) when the cluster has no NodePool and no NodeClaim."""
        if not self._stores[NODEPOOLS].keys and not self._stores[NODECLAIMS].keys:
            return []
        pools = self.list(NODEPOOLS)
        claims = self.list(NODECLAIMS)
        if not pools and not claims:
            return []
        now = self.clock.now()
        state = self._karpenter_state()
        done: list[str] = []
        with self._lock:
            nodes = {n["metadata"]["name"]: n for n in self.list(NODES)}
            pods = [p for p in self.list(PODS) if kube_requests.pod_is_active(p)]
            pool_by_name = {p["metadata"]["name"]: p for p in pools}
            for claim in claims:
                done += self._karpenter_progress(claim, pool_by_name.get(
                    (claim["metadata"].get("labels") or {}).get(NODEPOOL_LABEL, "")), nodes, pods, now)
            if done:  # read again what changed
                claims = self.list(NODECLAIMS)
                nodes = {n["metadata"]["name"]: n for n in self.list(NODES)}
                pods = [p for p in self.list(PODS) if kube_requests.pod_is_active(p)]
            consolidated = self._karpenter_consolidate(claims, pool_by_name, nodes, pods, now)
            if consolidated:
                done += consolidated
                claims = self.list(NODECLAIMS)
                nodes = {n["metadata"]["name"]: n for n in self.list(NODES)}
            done += self._karpenter_provision(pools, claims, nodes, pods, now)
            for pool in pools:
                self._karpenter_pool_status(pool, claims, nodes)
        return done

    # ------------------------------------------------------------------ NodeClaim lifecycle

    def _karpenter_progress(self, claim: Obj, pool: Obj | None, nodes: dict[str, Obj], pods: list[Obj],
                            now: float) -> list[str]:
        state = self._karpenter_state()
        name = claim["metadata"]["name"]
        born = state["born"].setdefault(name, now)
        age = now - born
        launch, register, initialize = self.karpenter_seconds
        labels = claim["metadata"].get("labels") or {}
        itype = next((i for i in INSTANCE_TYPES if i[0] == labels.get("node.kubernetes.io/instance-type")), None)
        done: list[str] = []
        node_name = (claim.get("status") or {}).get("nodeName")
        if node_name and node_name not in nodes:  # its node was deleted: so goes the claim
            self.delete(NODECLAIMS, name)
            self._karpenter_forget(name)
            return [f"nodeclaim {name} deleted with its node {node_name}"]
        if itype is None:
            return done
        if age >= launch and not _has(claim, "Launched"):
            cap = _capacity(itype)
            zone = labels.get("topology.kubernetes.io/zone", ZONES[0])
            provider = f"aws:///{zone}/i-{hashlib.sha1(name.encode()).hexdigest()[:17]}"

            def launched(c: Obj) -> None:
                status = c.setdefault("status", {})
                status.update(providerID=provider, imageID="ami-0emulator00000001",
                              capacity={"cpu": plain_quantity(cap["cpu"]), "memory": itype[6], GPU: str(itype[4]), "pods": "110"},
                              allocatable={"cpu": plain_quantity(cap["cpu"] - Decimal("0.1")), "memory": itype[6],
                                           GPU: str(itype[4]), "pods": "110"})
                _set_condition(c, "Launched", "True", "Launched", self.clock.rfc3339())

            claim = self.update(NODECLAIMS, name, launched, subresource="status")
            done.append(f"nodeclaim {name} launched")
        if age >= register and _has(claim, "Launched") and not _has(claim, "Registered"):
            node_name = f"ip-10-{int(hashlib.sha1(name.encode()).hexdigest()[:4], 16) % 256}-" \
                        f"{int(hashlib.sha1(name.encode()).hexdigest()[4:8], 16) % 256}-" \
                        f"{int(hashlib.sha1(name.encode()).hexdigest()[8:10], 16)}.ec2.internal"
            spec = claim.get("spec") or {}
            node = make_node(
                node_name, gpus=itype[4], gpu_product=itype[3] or None, cpu=str(itype[5]), memory=itype[6],
                zone=labels.get("topology.kubernetes.io/zone"), instance_type=itype[0],
                capacity_type=labels.get(CAPACITY_TYPE_LABEL),
                labels={**{k: v for k, v in labels.items()}, "karpenter.sh/registered": "true"},
                taints=[*(spec.get("taints") or []), *(spec.get("startupTaints") or [])],
                created=self.clock.rfc3339(),
            )
            node["spec"]["providerID"] = (claim.get("status") or {}).get("providerID", node["spec"]["providerID"])
            node["metadata"]["ownerReferences"] = [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name,
                                                    "uid": claim["metadata"].get("uid", ""), "blockOwnerDeletion": True}]
            self.upsert_node(node)

            def registered(c: Obj) -> None:
                c.setdefault("status", {})["nodeName"] = node_name
                _set_condition(c, "Registered", "True", "Registered", self.clock.rfc3339())

            claim = self.update(NODECLAIMS, name, registered, subresource="status")
            done.append(f"nodeclaim {name} registered node {node_name}")
        if age >= initialize and _has(claim, "Registered") and not _has(claim, "Initialized"):
            node_name = (claim.get("status") or {}).get("nodeName")
            startup = {(t.get("key"), t.get("effect")) for t in (claim.get("spec") or {}).get("startupTaints") or []}

            def initialized_node(n: Obj) -> None:
                n["metadata"].setdefault("labels", {})["karpenter.sh/initialized"] = "true"
                taints = [t for t in (n.get("spec") or {}).get("taints") or [] if (t.get("key"), t.get("effect")) not in startup]
                n["spec"]["taints"] = taints
                if not taints:
                    n["spec"].pop("taints")

            if node_name:
                self.update_node(node_name, initialized_node)

            def initialized(c: Obj) -> None:
                _set_condition(c, "Initialized", "True", "Initialized", self.clock.rfc3339())
                _set_condition(c, "Ready", "True", "Ready", self.clock.rfc3339())

            self.update(NODECLAIMS, name, initialized, subresource="status")
            done.append(f"nodeclaim {name} initialized")
            # kube-scheduler binds the pods Karpenter launched the node for.
            for key, claim_name in list(state["nominated"].items()):
                if claim_name != name:
                    continue
                del state["nominated"][key]
                pod = self.get_pod(*key)
                if pod is None or (pod.get("spec") or {}).get("nodeName"):
                    continue

                def bind(p: Obj, node=node_name) -> None:
                    p["spec"]["nodeName"] = node

                self.update_pod(key[0], key[1], bind)
                self.set_pod_phase(key[0], key[1], "Running")
                done.append(f"pod {key[0]}/{key[1]} bound to {node_name}")
        return done

    def _karpenter_forget(self, claim: str) -> None:
        state = self._karpenter_state()
        state["born"].pop(claim, None)
        state["empty_since"].pop(claim, None)
        for key in [k for k, v in state["nominated"].items() if v == claim]:
            del state["nominated"][key]

    def _karpenter_consolidate(self, claims: list[Obj], pools: dict[str, Obj], nodes: dict[str, Obj],
                               pods: list[Obj], now: float) -> list[str]:
        state = self._karpenter_state()
        busy = {(p.get("spec") or {}).get("nodeName") for p in pods
                if ((p.get("metadata") or {}).get("labels") or {}).get("app") not in _DAEMON_APPS}
        done = []
        for claim in claims:
            name = claim["metadata"]["name"]
            node = (claim.get("status") or {}).get("nodeName")
            if not node or not _has(claim, "Initialized") or node in busy or name in state["nominated"].values():
                state["empty_since"].pop(name, None)
                continue
            pool = pools.get((claim["metadata"].get("labels") or {}).get(NODEPOOL_LABEL, "")) or {}
            disruption = (pool.get("spec") or {}).get("disruption") or {}
            after = str(disruption.get("consolidateAfter") or "0s")
            if after == "Never":
                continue
            wait = max(self.karpenter_empty_seconds, _seconds(after))
            since = state["empty_since"].setdefault(name, now)
            if now - since < wait:
                continue
            if node in nodes:
                self.delete_node(node)
            self.delete(NODECLAIMS, name)
            self._karpenter_forget(name)
            done.append(f"nodeclaim {name} consolidated (node {node} empty)")
        return done

    # ------------------------------------------------------------------ provisioning

    def _karpenter_usage(self, pool: str, claims: list[Obj], nodes: dict[str, Obj]) -> dict[str, Decimal]:
        used = {"cpu": Decimal(0), "memory": Decimal(0), GPU: Decimal(0), "nodes": Decimal(0)}
        claimed = set()
        for claim in claims:
            labels = claim["metadata"].get("labels") or {}
            if labels.get(NODEPOOL_LABEL) != pool:
                continue
            itype = next((i for i in INSTANCE_TYPES if i[0] == labels.get("node.kubernetes.io/instance-type")), None)
            if itype is None:
                continue
            for k, v in _capacity(itype).items():
                used[k] += v
            used["nodes"] += 1
            claimed.add((claim.get("status") or {}).get("nodeName"))
        for name, node in nodes.items():
            if name in claimed or ((node["metadata"].get("labels") or {}).get(NODEPOOL_LABEL) != pool):
                continue
            capacity = self._karpenter_amounts(node, "capacity")
            used["cpu"] += capacity["cpu"]
            used["memory"] += capacity["memory"]
            used[GPU] += capacity[GPU]
            used["nodes"] += 1
        return used

    def _karpenter_offerings(self, pool: Obj) -> list[tuple[tuple, str, str, dict[str, str]]]:
        """(instance type, zone, capacity type, node labels) the pool may launch, cheapest first."""
        template = (pool.get("spec") or {}).get("template") or {}
        requirements = (template.get("spec") or {}).get("requirements") or []
        template_labels = (template.get("metadata") or {}).get("labels") or {}
        wants_reserved = any(r.get("key") == CAPACITY_TYPE_LABEL and r.get("operator") == "In"
                             and set(r.get("values") or []) == {"reserved"} for r in requirements)
        out = []
        for itype in sorted(INSTANCE_TYPES, key=lambda i: (i[4], i[5], i[0])):
            for capacity_type in CAPACITY_TYPES:
                if capacity_type == "reserved" and not wants_reserved:
                    continue
                for zone in ZONES:
                    labels = {**instance_labels(itype), CAPACITY_TYPE_LABEL: capacity_type,
                              "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": zone[:-1],
                              **template_labels, NODEPOOL_LABEL: pool["metadata"]["name"]}
                    if all(requirement_matches(r, labels) for r in requirements):
                        out.append((itype, zone, capacity_type, labels))
        return out

    def _karpenter_asks(self, pod: Obj) -> dict[str, Decimal] | None:
        """What the pod asks, or None (reported) when a quantity of it is none."""
        try:
            return kube_requests.pod_requests(pod, (GPU, kube_requests.CPU, kube_requests.MEMORY))
        except QuantityError as exc:
            unreadable(self, pod, exc, "karpenter")
            return None

    def _karpenter_limits(self, pool: Obj) -> dict[str, Any] | None:
        """The pool's `limits`, or None (reported: the pool launches nothing) when one is no quantity."""
        limits = (pool.get("spec") or {}).get("limits") or {}
        for name, value in limits.items():
            try:
                parse_quantity(value)
            except QuantityError as exc:
                unreadable(self, {"kind": "NodePool", **pool}, f"spec.limits[{name}]: {exc}", "karpenter")
                return None
        return limits

    def _karpenter_amounts(self, node: Obj, field: str) -> dict[str, Decimal]:
        """A node's capacity or allocatable of GPU, CPU, memory; a quantity that is none is reported and
        counts as nothing."""
        amounts = {GPU: Decimal(0), "cpu": Decimal(0), "memory": Decimal(0)}
        for name, value in ((node.get("status") or {}).get(field) or {}).items():
            if name in amounts:
                try:
                    amounts[name] = parse_quantity(value)
                except QuantityError as exc:
                    unreadable(self, {"kind": "Node", **node}, f"status.{field}[{name}]: {exc}", "karpenter")
        return amounts

    def _karpenter_used(self, pods: list[Obj]) -> dict[str, dict[str, Decimal]]:
        """What the pods bound to each node ask (node -> resource -> amount)."""
        used: dict[str, dict[str, Decimal]] = {}
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node:
                room = used.setdefault(node, {GPU: Decimal(0), "cpu": Decimal(0), "memory": Decimal(0)})
                for k, v in (self._karpenter_asks(p) or {}).items():
                    room[k] += v
        return used

    def _karpenter_node_fits(self, pod: Obj, asks: dict[str, Decimal], nodes: dict[str, Obj],
                             used: dict[str, dict[str, Decimal]]) -> str | None:
        """The first Ready node (by name) the pod fits on, after what ``used`` says its pods take; or None."""
        for name, node in sorted(nodes.items()):
            conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
            if conditions.get("Ready") != "True" or (node.get("spec") or {}).get("unschedulable"):
                continue
            if not pod_admits_labels(pod, node["metadata"].get("labels") or {}):
                continue
            if not tolerated(pod, (node.get("spec") or {}).get("taints") or []):
                continue
            alloc = self._karpenter_amounts(node, "allocatable")
            taken = used.get(name, {})
            room = {k: alloc[k] - taken.get(k, Decimal(0)) for k in (GPU, "cpu", "memory")}
            if _fits(asks, room):
                return name
        return None

    def _karpenter_provision(self, pools: list[Obj], claims: list[Obj], nodes: dict[str, Obj], pods: list[Obj],
                             now: float) -> list[str]:
        state = self._karpenter_state()
        claim_names = {c["metadata"]["name"] for c in claims}
        for key in [k for k, v in state["nominated"].items() if v not in claim_names]:
            del state["nominated"][key]
        # Room left on claims in flight (not yet initialized), after the pods nominated for them.
        in_flight: dict[str, tuple[Obj, dict[str, Decimal]]] = {}
        for claim in claims:
            if _has(claim, "Initialized") or claim["metadata"].get("deletionTimestamp"):
                continue
            labels = claim["metadata"].get("labels") or {}
            itype = next((i for i in INSTANCE_TYPES if i[0] == labels.get("node.kubernetes.io/instance-type")), None)
            if itype is not None:
                in_flight[claim["metadata"]["name"]] = (claim, _capacity(itype))
        by_key = {(p["metadata"].get("namespace", "default"), p["metadata"]["name"]): p for p in pods}
        for key, claim_name in state["nominated"].items():
            if claim_name in in_flight and key in by_key:
                room = in_flight[claim_name][1]
                for k, v in (self._karpenter_asks(by_key[key]) or {}).items():
                    room[k] -= v
        ordered = sorted(pools, key=lambda p: (-int((p.get("spec") or {}).get("weight") or 0), p["metadata"]["name"]))
        done = []
        pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName")
                   and (p.get("status") or {}).get("phase", "Pending") == "Pending"
                   and not p["metadata"].get("deletionTimestamp")]
        # What the pods bound to each node take, and, as the pending pods are placed one by one, what the
        # ones that fit a node already there will take: the next pod sees the room that is really left.
        used = self._karpenter_used(pods) if pending else {}
        offerings: dict[str, list] = {}
        # Oldest first; pods created in the same second in the order they were created (resourceVersion).
        for pod in sorted(pending, key=_pending_order):
            key = (pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
            asks = self._karpenter_asks(pod)
            if asks is None or key in state["nominated"]:
                continue
            fits = self._karpenter_node_fits(pod, asks, nodes, used)
            if fits is not None:  # Karpenter leaves it to the scheduler, whose node it will take
                room = used.setdefault(fits, {GPU: Decimal(0), "cpu": Decimal(0), "memory": Decimal(0)})
                for k, v in asks.items():
                    room[k] += v
                continue
            target = None
            for claim_name, (claim, room) in sorted(in_flight.items()):
                if (pod_admits_labels(pod, claim["metadata"].get("labels") or {})
                        and tolerated(pod, (claim.get("spec") or {}).get("taints") or []) and _fits(asks, room)):
                    target = claim_name
                    break
            if target is None:
                for pool in ordered:
                    if pool["metadata"].get("deletionTimestamp"):
                        continue
                    taints = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("taints") or []
                    if not tolerated(pod, taints):
                        continue
                    limits = self._karpenter_limits(pool)
                    if limits is None:
                        continue
                    provisioned = self._karpenter_usage(pool["metadata"]["name"], claims, nodes)
                    if pool["metadata"]["name"] not in offerings:
                        offerings[pool["metadata"]["name"]] = self._karpenter_offerings(pool)
                    for itype, zone, capacity_type, labels in offerings[pool["metadata"]["name"]]:
                        cap = _capacity(itype)
                        if not _fits(asks, cap) or not pod_admits_labels(pod, labels):
                            continue
                        grown = {**{k: provisioned[k] + cap[k] for k in cap}, "nodes": provisioned["nodes"] + 1}
                        if any(k in grown and grown[k] > parse_quantity(v) for k, v in limits.items()):
                            continue
                        claim = self._karpenter_create_claim(pool, itype, labels, now)
                        claims.append(claim)
                        target = claim["metadata"]["name"]
                        in_flight[target] = (claim, cap)
                        done.append(f"nodeclaim {target} created for pod {key[0]}/{key[1]} "
                                    f"({itype[0]}, {capacity_type}, {zone})")
                        break
                    if target is not None:
                        break
            if target is None:
                continue
            state["nominated"][key] = target
            for k, v in asks.items():
                in_flight[target][1][k] -= v
            self._karpenter_nominated_event(pod, target)
        return done

    def _karpenter_create_claim(self, pool: Obj, itype: tuple, labels: dict[str, str], now: float) -> Obj:
        state = self._karpenter_state()
        pool_name = pool["metadata"]["name"]
        while True:
            state["serial"] += 1
            suffix = hashlib.sha1(f"{pool_name}/{state['serial']}".encode()).hexdigest()[:5]
            name = f"{pool_name}-{suffix}"
            if self.get(NODECLAIMS, name) is None:
                break
        template_spec = ((pool.get("spec") or {}).get("template") or {}).get("spec") or {}
        requirements = [dict(r) for r in template_spec.get("requirements") or []]
        requirements.append({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [itype[0]]})
        spec: Obj = {
            "nodeClassRef": dict(template_spec.get("nodeClassRef") or {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                                     "name": "default"}),
            "requirements": requirements,
            "resources": {"requests": {"cpu": str(itype[5]), "memory": itype[6], GPU: str(itype[4])}},
            "expireAfter": template_spec.get("expireAfter") or "720h",
        }
        for field in ("taints", "startupTaints"):
            if template_spec.get(field):
                spec[field] = [dict(t) for t in template_spec[field]]
        claim = {
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "name": name, "labels": labels,
                "annotations": {"karpenter.sh/nodepool-hash-version": "v3"},
                "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": pool_name,
                                     "uid": pool["metadata"].get("uid", ""), "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }
        created = self.create(NODECLAIMS, claim)
        state["born"][name] = now

        def pending(c: Obj) -> None:
            c["status"] = {"conditions": _conditions(self.clock.rfc3339(),
                                                     ("Launched", "Unknown", "AwaitingReconciliation"),
                                                     ("Registered", "Unknown", "AwaitingReconciliation"),
                                                     ("Initialized", "Unknown", "AwaitingReconciliation"),
                                                     ("Ready", "Unknown", "AwaitingReconciliation"))}

        return self.update(NODECLAIMS, name, pending, subresource="status") or created

    def _karpenter_nominated_event(self, pod: Obj, claim: str) -> None:
        md = pod["metadata"]
        ts = self.clock.rfc3339()
        event = {
            "metadata": {"name": f"{md['name']}.{hashlib.sha1((md['name'] + claim).encode()).hexdigest()[:16]}",
                         "namespace": md.get("namespace", "default")},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": md["name"],
                               "namespace": md.get("namespace", "default"), "uid": md.get("uid", "")},
            "reason": "Nominated", "message": f"Pod should schedule on: nodeclaim/{claim}", "type": "Normal",
            "source": {"component": "karpenter"}, "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
            "reportingComponent": "karpenter",
        }
        self.upsert("events", event)

    def _karpenter_pool_status(self, pool: Obj, claims: list[Obj], nodes: dict[str, Obj]) -> None:
        name = pool["metadata"]["name"]
        used = self._karpenter_usage(name, claims, nodes)
        resources = {"cpu": plain_quantity(used["cpu"]), "memory": f"{int(used['memory'] / 1024)}Ki",
                     GPU: plain_quantity(used[GPU]), "nodes": plain_quantity(used["nodes"]),
                     "pods": plain_quantity(used["nodes"] * 110)}
        status = pool.get("status") or {}
        have = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        ready = {"ValidationSucceeded": "True", "NodeClassReady": "True", "NodeRegistrationHealthy": "True",
                 "Ready": "True"}
        if status.get("resources") == resources and status.get("nodes") == int(used["nodes"]) and all(
                have.get(k) == v for k, v in ready.items()):
            return

        def change(p: Obj) -> None:
            s = p.setdefault("status", {})
            s["resources"] = resources
            s["nodes"] = int(used["nodes"])
            for ctype, value in ready.items():
                _set_condition(p, ctype, value, ctype, self.clock.rfc3339())
            for c in s["conditions"]:
                c.setdefault("reason", c["type"])
                c.setdefault("message", "")

        self.update(NODEPOOLS, name, change, subresource="status")


def _pending_order(pod: Obj) -> tuple[str, int, str, str]:
    """Pending pods in the order they were created: creationTimestamp (whole seconds), then resourceVersion
    (the API server's order of writes; a pod not written since its creation keeps its creation's), then
    namespace and name."""
    md = pod["metadata"]
    rv = str(md.get("resourceVersion") or "")
    return (md.get("creationTimestamp") or "", int(rv) if rv.isdigit() else 0, md.get("namespace") or "", md["name"])


def _seconds(duration: str) -> float:
    total, number = 0.0, ""
    for ch in duration:
        if ch.isdigit():
            number += ch
        elif ch in "smh" and number:
            total += int(number) * {"s": 1, "m": 60, "h": 3600}[ch]
            number = ""
    return total
