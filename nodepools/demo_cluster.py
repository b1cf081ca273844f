"""The demo cluster of docs/getting-started.md#what-the-demo-is, as Kubernetes objects.

20 nodes of 4 V100 (the default pool; 16 of 16GB and 4 of 32GB: two platforms), 5 nodes of 4 A100 40GB (pool a100-40gb, ML-Ops) and 5 nodes of
4 A100 80GB (pool a100-80gb, R&D); NVIDIA operand pods on the GPU nodes; training, build and inference
pods of the demo projects, so that some projects run over quota; a few nodes not ready, each for
another reason; project team-nlp holds its GPUs idle (1 % utilization as the emulated DCGM exporter
reports it). Django-free: the demo command loads it into the database, the emulator serves it.
"""
from __future__ import annotations

from kube import wellknown
from typing import Any

from kubesim import make_node, make_pod
from kubesim.dcgm import UTILIZATION_ANNOTATION
from kube import gpu as kube_gpu

POOL_LABEL_KEY = "gpu-type"
DEPARTMENTS = {
    # department -> (its projects, pool it owns)
    "rnd": (["team-vision", "team-nlp", "team-speech", "team-robotics"], "a100-80gb"),
    "ml-ops": (["serve-chat", "serve-search", "serve-vision", "batch-scoring"], "a100-40gb"),
}
PRIORITY = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}

V100 = dict(gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384, instance_type="p3.8xlarge", cpu="32", memory="244Gi")
# Four nodes of the default pool carry the 32GB V100: a pool of two GPU types, with one platform each
# (workloads.demo), like OSMO's heterogeneous pool.
V100_32 = dict(V100, gpu_product="Tesla-V100-SXM2-32GB", gpu_memory_mib=32768)
V100_32_NODES = range(15, 19)
A100_40 = dict(gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960, instance_type="p4d.24xlarge", cpu="96",
               memory="1152Gi")
A100_80 = dict(gpu_product="NVIDIA-A100-SXM4-80GB", gpu_memory_mib=81920, instance_type="p4de.24xlarge", cpu="96",
               memory="1152Gi")
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]

# Nodes that are not ready, each for another reason (docs/concepts.md#not-ready).
CORDONED = "v100-07"
DISK_PRESSURE = "v100-13"
UNREACHABLE = "v100-19"
NO_DCGM = "a100-40gb-05"
MIGRATED = "a100-80gb-05"  # now in a100-80gb, still running an ML-Ops pod scheduled for a100-40gb


def demo_nodes() -> list[dict[str, Any]]:
    nodes = []
    for i in range(1, 21):
        name = f"v100-{i:02d}"
        conditions = {DISK_PRESSURE: {"DiskPressure": "True"}, UNREACHABLE: {"Ready": "Unknown"}}.get(name)
        nodes.append(make_node(
            name, gpus=4, labels={POOL_LABEL_KEY: "v100"}, zone=ZONES[i % 3], capacity_type="on-demand",
            unschedulable=name == CORDONED, conditions=conditions, **(V100_32 if i in V100_32_NODES else V100),
        ))
    for kind, spec in (("a100-40gb", A100_40), ("a100-80gb", A100_80)):
        for i in range(1, 6):
            nodes.append(make_node(
                f"{kind}-{i:02d}", gpus=4, labels={POOL_LABEL_KEY: kind}, zone=ZONES[i % 3],
                capacity_type="reserved", **spec,
            ))
    return nodes


def operand_pods(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pods = []
    for node in nodes:
        name = node["metadata"]["name"]
        if name == UNREACHABLE:
            continue
        for app in ("nvidia-container-toolkit-daemonset", "nvidia-dcgm-exporter"):
            if app == "nvidia-dcgm-exporter" and name == NO_DCGM:
                continue
            pods.append(make_pod(f"{app}-{name}", "gpu-operator", node=name, labels={"app": app}, priority=2000001000,
                                 priority_class="system-node-critical",
                                 containers=[{"name": "main", "requests": {"cpu": "100m", "memory": "128Mi"}}]))
    return pods


# The project that holds GPUs without using them (what the DCGM exporter reports for its pods, %).
IDLE_PROJECT = "team-nlp"
IDLE_UTILIZATION = "1"


def _workload(name, project, node, gpus, kind, *, phase="Running", selector=None, cpu="8", memory="64Gi"):
    annotations = {UTILIZATION_ANNOTATION: IDLE_UTILIZATION} if project == IDLE_PROJECT else None
    pod = make_pod(
        name, f"runai-{project}", node=node, phase=phase, priority=PRIORITY[kind], priority_class=kind,
        labels={"project": project, "workload-kind": kind}, annotations=annotations,
        containers=[{"name": "main", "requests": {"cpu": cpu, "memory": memory, kube_gpu.GPU_RESOURCE: str(gpus)},
                     "limits": {kube_gpu.GPU_RESOURCE: str(gpus)}}],
    )
    if selector:
        pod["spec"]["nodeSelector"] = {POOL_LABEL_KEY: selector}
    return pod


def demo_workloads() -> list[dict[str, Any]]:
    w = _workload
    return [
        # R&D trains on the V100s well beyond its projects' quota of 5 each (preemptible, over quota).
        *[w(f"vision-train-{i}", "team-vision", f"v100-{i:02d}", 4, "train") for i in range(1, 4)],  # 12 GPUs
        *[w(f"nlp-train-{i}", "team-nlp", f"v100-{i:02d}", 4, "train") for i in range(4, 6)],  # 8 GPUs
        w("speech-build-1", "team-speech", "v100-06", 2, "build"),
        w("robotics-build-1", "team-robotics", "v100-08", 1, "build-preemptible"),
        # R&D's own A100 80GB pool.
        *[w(f"vision-a100-{i}", "team-vision", f"a100-80gb-{i:02d}", 4, "train") for i in range(1, 3)],
        w("nlp-finetune-1", "team-nlp", "a100-80gb-03", 4, "train"),
        # ML-Ops serves inference (not preemptible) on its A100 40GB pool and on V100s.
        *[w(f"chat-{i}", "serve-chat", f"a100-40gb-{i:02d}", 2, "inference", selector="a100-40gb") for i in range(1, 4)],
        w("search-1", "serve-search", "a100-40gb-04", 4, "inference", selector="a100-40gb"),
        w("vision-serve-1", "serve-vision", "v100-09", 1, "inference"),
        w("vision-serve-2", "serve-vision", "v100-10", 1, "inference"),
        w("scoring-1", "batch-scoring", "v100-11", 4, "build-preemptible"),
        # Left behind when its node moved from a100-40gb to a100-80gb: "Undrained migrated node".
        w("chat-legacy", "serve-chat", MIGRATED, 1, "inference", selector="a100-40gb"),
        # Pending and finished pods count toward nothing.
        w("vision-train-pending", "team-vision", None, 8, "train", phase="Pending"),
        w("nlp-train-done", "team-nlp", "v100-12", 4, "train", phase="Succeeded"),
    ]


def demo_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, pods) of the demo cluster."""
    nodes = demo_nodes()
    return nodes, operand_pods(nodes) + demo_workloads()


# ---------------------------------------------------------------------------------------------------
# Karpenter (issue 13): two Karpenter-backed pools of the emulator-served demo (`make run`). Their NodePools
# (karpenter.sh/v1, classes of capacity "H100 production" and "T4 best-effort") live in the emulator, whose Karpenter
# stand-in launches NodeClaims for the pending GPU pods chaos submits now and then.
KARPENTER_LABEL_KEY = wellknown.KARPENTER_NODEPOOL_LABEL
KARPENTER_POOLS = {
    "h100-prod": "Karpenter NodePool h100-prod: on-demand H100 nodes for inference (tainted), launched on demand",
    "t4-spot": "Karpenter NodePool t4-spot: spot T4 nodes, consolidated when empty",
}
_NODE_CLASS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
_GPU_TAINT = {"key": kube_gpu.GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}
INFERENCE_TAINT = {"key": "workload-type", "value": "inference", "effect": "NoSchedule"}


def demo_karpenter_nodepools() -> list[dict[str, Any]]:
    def nodepool(name, requirements, *, limits, weight, policy, after, budgets, labels, taints=()):
        return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": {
            "template": {"metadata": {"labels": labels}, "spec": {
                "nodeClassRef": dict(_NODE_CLASS), "requirements": requirements,
                "taints": [dict(_GPU_TAINT), *(dict(t) for t in taints)],
                "expireAfter": "720h"}},
            "limits": limits, "weight": weight,
            "disruption": {"consolidationPolicy": policy, "consolidateAfter": after, "budgets": budgets}}}

    return [
        nodepool("h100-prod", [
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ZONES[:2]},
        ], limits={"cpu": "384", kube_gpu.GPU_RESOURCE: "16"}, weight=90, policy="WhenEmpty", after="1m",
            budgets=[{"nodes": "1"}], labels={"gpu-tier": "h100-prod", "workload-type": "inference"},
            taints=[INFERENCE_TAINT]),
        nodepool("t4-spot", [
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["t4"]},
            {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1", "4"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
        ], limits={kube_gpu.GPU_RESOURCE: "8"}, weight=10, policy="WhenEmptyOrUnderutilized", after="30s",
            budgets=[{"nodes": "20%"}], labels={"gpu-tier": "best-effort"}),
    ]


def demo_karpenter_pods() -> list[dict[str, Any]]:
    """A pending inference pod for h100-prod: Karpenter launches its first node as the demo starts."""
    pod = _workload("chat-h100-1", "serve-chat", None, 8, "inference", phase="Pending")
    pod["spec"]["nodeSelector"] = {KARPENTER_LABEL_KEY: "h100-prod"}
    pod["spec"]["tolerations"].append({"key": "workload-type", "operator": "Equal", "value": "inference",
                                       "effect": "NoSchedule"})
    return [pod]
