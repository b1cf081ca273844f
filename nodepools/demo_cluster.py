"""The demo cluster of docs/getting-started.md#what-the-demo-is, as Kubernetes objects.

20 nodes of 4 V100 (the default pool; 16 of 16GB and 4 of 32GB: two platforms), 5 nodes of 4 A100 40GB (pool a100-40gb, ML-Ops) and 5 nodes of
4 A100 80GB (pool a100-80gb, R&D); three pools whose GPUs are shared (docs/getting-started.md#gpu-sharing):
3 nodes of 4 A100 80GB cut into MIG slices (pool a100-mig, NVIDIA's `all-balanced` layout with the mixed
strategy: each node publishes 4 nvidia.com/mig-3g.40gb, 4 mig-2g.20gb and 8 mig-1g.10gb), 3 nodes of 4 L4
time-sliced into 4 replicas each (pool l4-shared: nvidia.com/gpu 16 a node) and 2 nodes of 4 whole A10G
that KAI Scheduler shares out in fractions (pool a10g, `gpu-fraction` pods beside their GPU's reservation pod);
NVIDIA operand pods on the GPU nodes; training, build and inference
pods of the demo projects, so that some projects run over quota; a few nodes not ready, each for
another reason; project team-nlp holds its GPUs idle (1 % utilization as the emulated DCGM exporter
reports it). Django-free: the demo command loads it into the database, the emulator serves it.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from kube import wellknown

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
A100_MIG = dict(A100_80, mig_config="all-balanced", mig_strategy="mixed")
L4_SHARED = dict(gpu_product="NVIDIA-L4", gpu_memory_mib=23034, instance_type="g6.12xlarge", cpu="48", memory="192Gi",
                 gpu_replicas=4)
A10G = dict(gpu_product="NVIDIA-A10G", gpu_memory_mib=23028, instance_type="g5.12xlarge", cpu="48", memory="192Gi")
# The pools whose GPUs are shared: (pool, node name prefix, nodes, spec, description).
SHARED_POOLS = (
    ("a100-mig", "a100-mig", 3, A100_MIG,
     "3 nodes of 4 A100 80GB in MIG slices (all-balanced: 3g.40gb, 2g.20gb, 1g.10gb) for notebooks and inference"),
    ("l4-shared", "l4", 3, L4_SHARED, "3 nodes of 4 L4 time-sliced into 4 replicas each, for light inference and builds"),
    ("a10g", "a10g", 2, A10G, "2 nodes of 4 A10G whose GPUs KAI Scheduler shares out in fractions (gpu-fraction)"),
)
# Quota in the shared pools, in GPU-equivalents (a 1g.10gb slice of an A100 is 1/7 of a GPU, a replica of a
# 4-replica L4 a quarter, a gpu-fraction its value): department -> (its own, {project: its own}).
SHARED_QUOTAS = {
    "a100-mig": {"rnd": (Decimal("6"), {"team-vision": Decimal("2"), "team-nlp": Decimal("1.5"),
                                        "team-speech": Decimal("1.5"), "team-robotics": Decimal("1")}),
                 "ml-ops": (Decimal("6"), {"serve-chat": Decimal("3"), "serve-search": Decimal("1"),
                                           "serve-vision": Decimal("1"), "batch-scoring": Decimal("1")})},
    "l4-shared": {"rnd": (Decimal("4"), {"team-speech": Decimal("2"), "team-robotics": Decimal("2")}),
                  "ml-ops": (Decimal("8"), {"serve-search": Decimal("4"), "batch-scoring": Decimal("2"),
                                            "serve-chat": Decimal("1"), "serve-vision": Decimal("1")})},
    "a10g": {"rnd": (Decimal("2"), {"team-vision": Decimal("1"), "team-nlp": Decimal("1")}),
             "ml-ops": (Decimal("6"), {"serve-vision": Decimal("2.5"), "serve-chat": Decimal("2.5"),
                                       "serve-search": Decimal("0.5"), "batch-scoring": Decimal("0.5")})},
}
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
    for pool, prefix, count, spec, _ in SHARED_POOLS:
        for i in range(1, count + 1):
            nodes.append(make_node(f"{prefix}-{i:02d}", gpus=4, labels={POOL_LABEL_KEY: pool}, zone=ZONES[i % 3],
                                   capacity_type="on-demand", **spec))
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


def _workload(name, project, node, gpus, kind, *, phase="Running", selector=None, cpu="8", memory="64Gi",
              resource=kube_gpu.GPU_RESOURCE, fraction=None, gpu_group=None):
    """A demo pod asking `gpus` of `resource` (a MIG profile's `nvidia.com/mig-<profile>`, or a time-sliced
    node's replicas of nvidia.com/gpu), or a KAI `fraction` of one GPU (no GPU resource: KAI's way, with
    the label of its GPU's group, `gpu_group`, shared with the reservation pod)."""
    annotations = {UTILIZATION_ANNOTATION: IDLE_UTILIZATION} if project == IDLE_PROJECT else {}
    labels = {"project": project, "workload-kind": kind}
    gpu = {} if fraction else {resource: str(gpus)}
    if fraction:
        annotations[kube_gpu.ANNOTATION_GPU_FRACTION] = fraction
        labels[kube_gpu.GPU_GROUP_LABEL] = gpu_group
    pod = make_pod(
        name, f"runai-{project}", node=node, phase=phase, priority=PRIORITY[kind], priority_class=kind,
        labels=labels, annotations=annotations or None,
        containers=[{"name": "main", "requests": {"cpu": cpu, "memory": memory, **gpu}, "limits": dict(gpu)}],
    )
    if fraction:
        pod["spec"]["schedulerName"] = wellknown.KAI_SCHEDULER_NAME
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
        *shared_workloads(),
    ]


def _slices(profile: str) -> str:
    return kube_gpu.mig_resource(profile)


# The GPUs KAI Scheduler shares on a10g-01, each held whole by its reservation pod: group -> sharers.
FRACTION_GROUPS = {"a10g-01-gpu0": ("vision-frac-1", "vision-frac-2"), "a10g-01-gpu1": ("chat-frac-1", "chat-frac-2")}
FRACTION = "0.5"


def shared_workloads() -> list[dict[str, Any]]:
    """The pods of the shared pools: notebooks on 1g.10gb slices, inference on 3g.40gb, a build on 2g.20gb
    (a100-mig); inference and batch scoring on replicas of time-sliced L4s (l4-shared); fractional inference
    (`gpu-fraction: "0.5"`) on A10Gs KAI Scheduler shares, beside each GPU's reservation pod (a10g)."""
    w = _workload
    pods = [
        *[w(f"vision-notebook-{i}", "team-vision", "a100-mig-01", 1, "build", resource=_slices("1g.10gb"),
            cpu="4", memory="32Gi") for i in range(1, 4)],
        *[w(f"nlp-notebook-{i}", "team-nlp", "a100-mig-02", 1, "build", resource=_slices("1g.10gb"),
            cpu="4", memory="32Gi") for i in range(1, 3)],
        w("speech-mig-1", "team-speech", "a100-mig-03", 1, "build", resource=_slices("2g.20gb")),
        *[w(f"chat-mig-{i}", "serve-chat", f"a100-mig-{i:02d}", 1, "inference", resource=_slices("3g.40gb"))
          for i in range(1, 3)],
        *[w(f"search-replica-{i}", "serve-search", "l4-01", 1, "inference", cpu="4", memory="16Gi")
          for i in range(1, 5)],
        *[w(f"scoring-replica-{i}", "batch-scoring", "l4-02", 2, "build-preemptible", cpu="4", memory="16Gi")
          for i in range(1, 3)],
    ]
    for group, sharers in FRACTION_GROUPS.items():
        pods.append(make_pod(f"gpu-reservation-{group}", kube_gpu.RESERVATION_NAMESPACE, node="a10g-01",
                             labels={"app": kube_gpu.RESERVATION_NAMESPACE, kube_gpu.GPU_GROUP_LABEL: group},
                             containers=[{"name": "resource-reservation",
                                          "requests": {kube_gpu.GPU_RESOURCE: "1"}}]))
        for name in sharers:
            project = "serve-vision" if name.startswith("vision") else "serve-chat"
            pods.append(w(name, project, "a10g-01", 0, "inference", fraction=FRACTION, gpu_group=group, cpu="4",
                          memory="16Gi"))
    return pods


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
