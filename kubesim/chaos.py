"""Chaos: keeps a demo cluster alive and believable.

A steady state, not a drift: about 3-6 nodes are not ready at any time, each for a few minutes, then it
recovers; over time every not-ready reason of the console appears (disk/memory/PID pressure, network
unavailable, kubelet not ready, node unreachable, cordoned, missing NVIDIA container toolkit or DCGM
exporter pod).  Meanwhile GPU pods start where GPUs are free, finish and are deleted.

Deterministic for tests: :meth:`ChaosMixin.chaos_step` takes the random generator, and reads the
emulator's one clock (a :class:`kubesim.clock.ManualClock` in tests).
"""

from __future__ import annotations

import math
import random
import threading
import zlib
from collections import Counter
from typing import Any

import orjson

from kubesim.errors import ApiError
from kubesim.dcgm import UTILIZATION_ANNOTATION
from kubesim.factories import _GPU, _NAMESPACES, make_pod
from kubesim.resources import NODES, PODS, get_resource
from kubesim.util import Key, Obj
from kube import gpu as kgpu

TOOLKIT_APP = "nvidia-container-toolkit-daemonset"
DCGM_APP = "nvidia-dcgm-exporter"
_DEPLOY_LABEL = {TOOLKIT_APP: "nvidia.com/gpu.deploy.container-toolkit", DCGM_APP: "nvidia.com/gpu.deploy.dcgm-exporter"}

# Faults chaos injects: name -> what it does to the node.
CONDITION_FAULTS = {
    "DiskPressure": ("DiskPressure", "True"),
    "MemoryPressure": ("MemoryPressure", "True"),
    "PIDPressure": ("PIDPressure", "True"),
    "NetworkUnavailable": ("NetworkUnavailable", "True"),
    "KubeletNotReady": ("Ready", "False"),
    "NodeUnreachable": ("Ready", "Unknown"),
}
FAULTS = (*CONDITION_FAULTS, "Cordoned", "MissingToolkit", "MissingDCGM")
_OPERAND_FAULTS = {"MissingToolkit": TOOLKIT_APP, "MissingDCGM": DCGM_APP}
_HEALTHY = {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
            "NetworkUnavailable": "False"}


class ChaosMixin:
    """Part of :class:`kubesim.KubeEmulator`: the chaos thread and its steps."""

    #: Nodes not ready at any time (at most half the nodes of a small cluster).
    chaos_not_ready = (3, 6)
    #: Seconds a node stays not ready.
    chaos_fault_seconds = (120.0, 360.0)
    #: Chaos pods (GPU workloads it starts) kept at most.
    chaos_max_pods = 50
    #: Share of pod steps that submit a pending GPU pod for a Karpenter NodePool (when there are any).
    chaos_karpenter_rate = 0.1
    #: Whether chaos starts and finishes GPU workload pods of its own (``--no-chaos-workloads``: off, when
    #: workloads come from elsewhere, e.g. the console's demo submitting Jobs).
    chaos_workloads = True

    def _init_chaos(self) -> None:
        self._chaos_thread: threading.Thread | None = None
        self._chaos_stop = threading.Event()
        self._chaos_pods: list[Key] = []
        self._chaos_serial = 0
        self._chaos_faults: dict[str, tuple[str, float]] = {}  # node -> (fault, recovers at)
        self._chaos_removed: dict[str, list[Obj]] = {}  # node -> operand pods chaos deleted
        self._chaos_seen: Counter[str] = Counter()  # fault -> times injected
        self._chaos_last: float | None = None

    def start_chaos(self, interval: float = 1.0, seed: int | None = None) -> None:
        """Every ``interval`` seconds make plausible changes (see :meth:`chaos_step`)."""
        self.stop_chaos()
        rng = random.Random(seed)
        self._chaos_stop = threading.Event()
        stop = self._chaos_stop

        def run() -> None:
            while not stop.wait(interval):
                try:
                    self.chaos_step(rng)
                    if not self.controllers_running:  # else the controller loop does these
                        # What the schedulers would report about their queues (KAI / Kueue), if any exist.
                        self.report_queue_status()
                        # Kueue: Workloads for queued Jobs, admission, preemption, queue status.
                        self.kueue_step()
                        # Karpenter: nodes for pending pods, NodeClaims progressing, empty nodes consolidated.
                        self.karpenter_step()
                except ApiError:
                    pass  # the object vanished meanwhile (e.g. deleted by a test): try again next tick

        self._chaos_thread = threading.Thread(target=run, name="kube-emulator-chaos", daemon=True)
        self._chaos_thread.start()

    def stop_chaos(self) -> None:
        """Stop the chaos thread if running."""
        self._chaos_stop.set()
        thread, self._chaos_thread = self._chaos_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def chaos_status(self) -> Obj:
        """Nodes chaos holds not ready (fault, seconds left) and how often each fault was injected."""
        with self._lock:
            now = self.clock.now()
            return {
                "faults": {n: {"fault": f, "seconds_left": round(t - now, 1)} for n, (f, t) in self._chaos_faults.items()},
                "injected": dict(self._chaos_seen),
            }

    # ------------------------------------------------------------------ reading the cluster

    def _gpus_in_use(self, node: str) -> int:
        """GPUs requested by the unfinished pods bound to a node (call with the lock held)."""
        index = get_resource(PODS).field_index
        name_at, phase_at = index["spec.nodeName"], index["status.phase"]
        used = 0
        for entry in self._stores[PODS].entries.values():
            fields = entry[3]
            if fields[name_at] != node or fields[phase_at] in ("Succeeded", "Failed"):
                continue
            for container in orjson.loads(entry[0]).get("spec", {}).get("containers", []):
                resources = container.get("resources") or {}
                gpus = (resources.get("requests") or {}).get(_GPU) or (resources.get("limits") or {}).get(_GPU) or 0
                used += int(gpus) if str(gpus).isdigit() else 0
        return used

    def not_ready_nodes(self) -> dict[str, list[str]]:
        """Nodes the console shows not ready, with the faults seen (the console's rules, docs/concepts.md#not-ready).

        Missing operand pods count only in a cluster that runs the NVIDIA operands at all; pods whose
        nodeSelector no longer matches their node's labels make it an undrained migrated node.
        """
        with self._lock:
            index = get_resource(PODS).field_index
            name_at, phase_at = index["spec.nodeName"], index["status.phase"]
            operands: dict[str, set[str]] = {}
            selector_pods: dict[str, list[bytes]] = {}
            any_operands = False
            pods = self._stores[PODS].entries
            check_selectors = len(pods) <= 20_000  # keeps a benchmark-sized cluster's steps cheap
            for data, _rv, labels, fields in pods.values():
                node, phase = fields[name_at], fields[phase_at]
                if not node or phase in ("Succeeded", "Failed"):
                    continue
                app = dict(labels).get("app")
                if app in _DEPLOY_LABEL:
                    any_operands = True
                    operands.setdefault(node, set()).add(app)
                elif check_selectors and b'"nodeSelector"' in data:
                    selector_pods.setdefault(node, []).append(data)
            out: dict[str, list[str]] = {}
            for key, entry in self._stores[NODES].entries.items():
                node = orjson.loads(entry[0])
                name, labels = key[1], node["metadata"].get("labels") or {}
                reasons = []
                conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
                for fault, (ctype, status) in CONDITION_FAULTS.items():
                    if conditions.get(ctype, _HEALTHY[ctype]) == status:
                        reasons.append(fault)
                if "Ready" not in conditions:
                    reasons.append("NodeUnreachable")
                if (node.get("spec") or {}).get("unschedulable"):
                    reasons.append("Cordoned")
                if any_operands and _is_gpu_node(node):
                    for fault, app in _OPERAND_FAULTS.items():
                        if labels.get(_DEPLOY_LABEL[app]) != "false" and app not in operands.get(name, ()):
                            reasons.append(fault)
                for data in selector_pods.get(name, ()):
                    wanted = (orjson.loads(data).get("spec") or {}).get("nodeSelector") or {}
                    if any(labels.get(k) != v for k, v in wanted.items()):
                        reasons.append("UndrainedMigrated")
                        break
                if reasons:
                    out[name] = reasons
            return out

    # ------------------------------------------------------------------ one step

    def chaos_step(self, rng: random.Random | None = None) -> str:
        """Make the changes due now (the emulator's clock); returns what happened ("node ...; pod ...").

        Nodes whose fault time is over recover; unmanaged not-ready nodes (from the scenario or a
        person) get a recovery time too; then faults are injected or healed to stay within
        :attr:`chaos_not_ready` (more often the longer since the last step), each time the fault
        injected least so far; and one pod starts, finishes or is deleted.
        """
        rng = rng or random.Random()
        now = self.clock.now()
        done: list[str] = []
        with self._lock:
            low, high = self.chaos_not_ready
            total = len(self._stores[NODES].entries)
            high = min(high, max(total // 2, 1))
            low = min(low, high)
            elapsed = 5.0 if self._chaos_last is None else max(now - self._chaos_last, 0.0)
            self._chaos_last = now
            # Recover nodes whose time is over.
            for name, (fault, until) in sorted(self._chaos_faults.items()):
                if until <= now:
                    done.append(self._chaos_heal(name, fault))
            bad = self.not_ready_nodes()
            lo_s, hi_s = self.chaos_fault_seconds
            for name in sorted(bad):
                if name not in self._chaos_faults:
                    self._chaos_faults[name] = ("adopted", now + rng.uniform(lo_s, hi_s))
            for name in [n for n in self._chaos_faults if n not in bad]:
                del self._chaos_faults[name]  # healed by someone else
            # Too many: recover the ones due soonest.
            for name, (fault, _until) in sorted(self._chaos_faults.items(), key=lambda kv: kv[1][1])[
                : max(len(bad) - high, 0)
            ]:
                done.append(self._chaos_heal(name, fault))
            count = min(len(bad), high)
            # Too few: inject now; otherwise now and then, so that about (low+high)/2 are down on average.
            rate = ((low + high) / 2) / ((lo_s + hi_s) / 2)  # faults per second (Little's law)
            want = max(low - count, 0)
            if want == 0 and count < high and rng.random() < 1 - math.exp(-rate * elapsed):
                want = 1
            healthy = sorted(n for _, n in self._stores[NODES].keys if n not in bad and n not in self._chaos_faults)
            rng.shuffle(healthy)
            for name in healthy:
                if want <= 0:
                    break
                message = self._chaos_inject(name, rng, now + rng.uniform(lo_s, hi_s))
                if message:
                    done.append(message)
                    want -= 1
        done.append(self._chaos_pod_step(rng))
        return "; ".join(done)

    def _chaos_inject(self, name: str, rng: random.Random, until: float) -> str | None:
        """Put one fault on a healthy node, the one injected least so far among those that apply. Lock held."""
        node = orjson.loads(self._stores[NODES].entries[("", name)][0])
        operand_pods = {
            dict(e[2]).get("app"): key
            for key, e in self._stores[PODS].entries.items()
            if e[3][get_resource(PODS).field_index["spec.nodeName"]] == name and dict(e[2]).get("app") in _DEPLOY_LABEL
        }
        choices = [f for f in FAULTS if f not in _OPERAND_FAULTS or _OPERAND_FAULTS[f] in operand_pods]
        if not _is_gpu_node(node):
            choices = [f for f in choices if f not in _OPERAND_FAULTS]
        least = min(self._chaos_seen[f] for f in choices)
        fault = rng.choice([f for f in choices if self._chaos_seen[f] == least])
        if fault in CONDITION_FAULTS:
            ctype, status = CONDITION_FAULTS[fault]
            self.set_node_condition(name, ctype, status)
        elif fault == "Cordoned":
            self.cordon(name, True)
        else:
            key = operand_pods[_OPERAND_FAULTS[fault]]
            removed = self._delete(PODS, key)
            self._chaos_removed.setdefault(name, []).append(removed)
        self._chaos_seen[fault] += 1
        self._chaos_faults[name] = (fault, until)
        return f"node {name} not ready: {fault}"

    def _chaos_heal(self, name: str, fault: str) -> str:
        """Bring a node back: healthy conditions, uncordoned, operand pods back, migrated pods evicted."""
        self._chaos_faults.pop(name, None)
        entry = self._stores[NODES].entries.get(("", name))
        if entry is None:
            return f"node {name} gone"
        node = orjson.loads(entry[0])
        conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
        for ctype, status in _HEALTHY.items():
            if conditions.get(ctype, status if ctype != "Ready" else None) != status:
                self.set_node_condition(name, ctype, status)
        if (node.get("spec") or {}).get("unschedulable"):
            self.cordon(name, False)
        bad = self.not_ready_nodes().get(name, [])
        removed = {p["metadata"].get("labels", {}).get("app"): p for p in self._chaos_removed.pop(name, [])}
        namespace = self._operand_namespace()
        for fault_name, app in _OPERAND_FAULTS.items():
            if fault_name in bad:
                old = removed.get(app)
                pod = make_pod(
                    f"{app}-{name}", old["metadata"]["namespace"] if old else namespace, node=name,
                    labels={"app": app}, priority=2000001000, priority_class="system-node-critical",
                    created=self.clock.rfc3339(),
                    containers=[{"name": "main", "requests": {"cpu": "100m", "memory": "128Mi"}}],
                )
                self.upsert_pod(pod)
        if "UndrainedMigrated" in bad:
            labels = node["metadata"].get("labels") or {}
            for key, e in list(self._stores[PODS].entries.items()):
                if e[3][get_resource(PODS).field_index["spec.nodeName"]] != name or b'"nodeSelector"' not in e[0]:
                    continue
                wanted = (orjson.loads(e[0]).get("spec") or {}).get("nodeSelector") or {}
                if any(labels.get(k) != v for k, v in wanted.items()):
                    self._delete(PODS, key)  # evicted, as a person fixing the node would
        return f"node {name} recovered from {fault}"

    def _operand_namespace(self) -> str:
        for key, e in self._stores[PODS].entries.items():
            if dict(e[2]).get("app") in _DEPLOY_LABEL:
                return key[0]
        return "gpu-operator"

    def _chaos_pod_step(self, rng: random.Random) -> str:
        """Start a GPU pod where GPUs are free (unless :attr:`chaos_workloads` is off), or finish / delete one
        chaos started; now and then (where Karpenter NodePools exist) a pending GPU pod for one of them, which
        Karpenter launches a node for."""
        if self._stores["nodepools.karpenter.sh"].keys and rng.random() < self.chaos_karpenter_rate:
            return self._chaos_karpenter_pod(rng)
        with self._lock:
            nodes, pods = self._stores[NODES], self._stores[PODS]
            if not nodes.keys:
                return "no nodes"
            node = rng.choice(nodes.keys)[1]
            gpu_nodes: list[tuple[str, int]] = []  # (name, GPU count) among a random sample
            for key in rng.sample(nodes.keys, min(20, len(nodes.keys))):
                labels = dict(nodes.entries[key][2])
                if "nvidia.com/gpu.present" in labels and key[1] not in self._chaos_faults:
                    gpu_nodes.append((key[1], int(labels.get("nvidia.com/gpu.count") or 1)))
            self._chaos_pods = [k for k in self._chaos_pods if k in pods.entries]
            phase_index = get_resource(PODS).field_index["status.phase"]
            chaos_pods = {k: pods.entries[k][3][phase_index] for k in self._chaos_pods}
        action = "finish" if len(chaos_pods) > self.chaos_max_pods else rng.choice(("pod", "pod", "finish", "finish"))
        if action == "finish" and chaos_pods:
            (ns, name), phase = rng.choice(sorted(chaos_pods.items()))
            if phase in ("Succeeded", "Failed"):
                self.delete_pod(ns, name)
                return f"pod {ns}/{name} deleted"
            phase = rng.choice(("Succeeded", "Succeeded", "Failed"))
            self.set_pod_phase(ns, name, phase)
            return f"pod {ns}/{name} {phase}"
        if not self.chaos_workloads:
            return "no new workload pod (chaos workloads off)"
        # Like the scheduler, place GPU pods only where GPUs are free.
        with self._lock:
            free = [(name, count - self._gpus_in_use(name)) for name, count in gpu_nodes]
        free = [(name, gpus) for name, gpus in free if gpus > 0]
        target, gpus = rng.choice(free) if free else (node, 0)
        requests: dict[str, Any] = {"cpu": str(rng.choice((1, 2, 4))), "memory": f"{rng.choice((4, 8, 16))}Gi"}
        if gpus:
            requests[kgpu.GPU_RESOURCE] = rng.choice([g for g in (1, 2, 4, 8) if g <= gpus])
        ns = rng.choice(_NAMESPACES[:5])
        with self._lock:
            self._chaos_serial += 1  # unique even when two steps draw the same random bits
            name = f"chaos-{self._chaos_serial:05d}-{rng.getrandbits(24):06x}"
        # What the DCGM exporter reports for its GPUs: mostly busy, one in five idle (from the name, so
        # that the random sequence of the chaos stays the same).
        spread = zlib.crc32(name.encode()) % 100
        utilization = spread % 4 if spread < 20 else 30 + spread % 66
        pod = make_pod(
            name, ns, node=target, containers=[{"name": "main", "requests": requests}], labels={"app": "chaos"},
            annotations={UTILIZATION_ANNOTATION: str(utilization)} if gpus else None, created=self.clock.rfc3339(),
        )
        self.add_pod(pod)
        with self._lock:
            self._chaos_pods.append((ns, name))
        return f"pod {ns}/{name} started on {target}"

    def _chaos_karpenter_pod(self, rng: random.Random) -> str:
        """A pending GPU pod selecting one Karpenter NodePool (tolerating the GPU taint): no node fits it,
        so Karpenter (kubesim.karpenter) launches one."""
        pools = {p["metadata"]["name"]: p for p in self.list("nodepools.karpenter.sh")}
        pool = rng.choice(sorted(pools))
        taints = ((pools[pool].get("spec") or {}).get("template") or {}).get("spec", {}).get("taints") or []
        ns = rng.choice(_NAMESPACES[:5])
        priority, klass = rng.choice(((50, "train"), (125, "inference")))
        with self._lock:
            self._chaos_serial += 1
            name = f"chaos-{self._chaos_serial:05d}-{rng.getrandbits(24):06x}"
        pod = make_pod(name, ns, phase="Pending", priority=priority, priority_class=klass, labels={"app": "chaos"},
                       created=self.clock.rfc3339(), containers=[{"name": "main", "requests": {"cpu": "2", "memory": "8Gi",
                                                                 kgpu.GPU_RESOURCE: rng.choice((1, 4))}}])
        pod["spec"]["nodeSelector"] = {"karpenter.sh/nodepool": pool}
        pod["spec"]["tolerations"] += [{"key": t["key"], "operator": "Equal", "value": t.get("value", ""),
                                        "effect": t["effect"]} for t in taints if t.get("key") != kgpu.GPU_RESOURCE]
        self.add_pod(pod)
        with self._lock:
            self._chaos_pods.append((ns, name))
        return f"pod {ns}/{name} pending for NodePool {pool}"


def _is_gpu_node(node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    if labels.get("nvidia.com/gpu.present") == "true":
        return True
    capacity = (node.get("status") or {}).get("capacity") or {}
    return str(capacity.get(_GPU, "0")) not in ("0", "")
