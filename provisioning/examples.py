"""The starting points of the NodePool form: classes of capacity as Karpenter NodePools (docs/administration/karpenter.md).

Each is a `spec` of a `karpenter.sh/v1` NodePool (field names from Karpenter's CRD and its docs'
examples, e.g. concepts/nodepools). Instance types and GPU names are AWS's (the karpenter-provider-aws
well-known labels); any provider's keys work the same way.
"""
from __future__ import annotations

import copy
from kube import wellknown
from kube import gpu as kube_gpu
from typing import Any

NODE_CLASS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
GPU_TAINT = {"key": kube_gpu.GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}


def _spec(requirements, *, limits, weight=None, taints=(), policy="WhenEmptyOrUnderutilized", after="5m",
          budgets=None, expire="720h", labels=None, startup_taints=()) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": dict(labels or {})},
            "spec": {
                "nodeClassRef": dict(NODE_CLASS),
                "requirements": [dict(r) for r in requirements],
                "taints": [dict(t) for t in taints],
                "startupTaints": [dict(t) for t in startup_taints],
                "expireAfter": expire,
            },
        },
        "limits": dict(limits),
        "disruption": {"consolidationPolicy": policy, "consolidateAfter": after,
                       "budgets": budgets if budgets is not None else [{"nodes": "10%"}]},
    }
    if weight is not None:
        spec["weight"] = weight
    return spec


def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


CAPACITY = wellknown.KARPENTER_CAPACITY_TYPE_LABEL
ARCH = "kubernetes.io/arch"
ZONE = "topology.kubernetes.io/zone"
GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
FAMILY = "karpenter.k8s.aws/instance-family"

EXAMPLES: dict[str, dict[str, Any]] = {
    "h100-prod": {
        "title": "H100 production: on-demand or reserved, high weight, busy nodes never consolidated",
        "spec": _spec(
            [req(FAMILY, "In", "p5"), req(GPU_NAME, "In", "h100"), req(CAPACITY, "In", "on-demand", "reserved"),
             req(ARCH, "In", "amd64")],
            limits={"cpu": "1536", "memory": "16Ti", kube_gpu.GPU_RESOURCE: "64"}, weight=90, taints=[GPU_TAINT],
            policy="WhenEmpty", after="30m",
            budgets=[{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "1"}],
            expire="Never", labels={"gpu-tier": "h100-prod"}),
    },
    "a100-standard": {
        "title": "A100 standard: the shared training pool",
        "spec": _spec(
            [req(FAMILY, "In", "p4d", "p4de"), req(GPU_NAME, "In", "a100"), req(CAPACITY, "In", "on-demand"),
             req(ZONE, "In", "us-east-1a", "us-east-1b")],
            limits={"cpu": "960", "memory": "8Ti", kube_gpu.GPU_RESOURCE: "40"}, weight=50, taints=[GPU_TAINT],
            policy="WhenEmptyOrUnderutilized", after="10m", labels={"gpu-tier": "a100-standard"}),
    },
    "t4-best-effort": {
        "title": "T4 best-effort: cheap spot capacity, consolidated when underutilized",
        "spec": _spec(
            [req(FAMILY, "In", "g4dn"), req(GPU_NAME, "In", "t4"), req(CAPACITY, "In", "spot")],
            limits={"cpu": "512", kube_gpu.GPU_RESOURCE: "32"}, weight=10, taints=[GPU_TAINT],
            policy="WhenEmptyOrUnderutilized", after="1m",
            budgets=[{"nodes": "20%", "reasons": ["Empty", "Underutilized"]}],
            labels={"gpu-tier": "best-effort"}),
    },
    "spot-only": {
        "title": "Spot only: any GPU instance, interruptible capacity only",
        "spec": _spec(
            [req("karpenter.k8s.aws/instance-gpu-count", "Gt", "0"), req(CAPACITY, "In", "spot")],
            limits={kube_gpu.GPU_RESOURCE: "16"}, weight=5, taints=[GPU_TAINT],
            policy="WhenEmptyOrUnderutilized", after="30s", labels={"capacity": "spot"}),
    },
    "inference-only": {
        "title": "Inference only: tainted, so that only workloads tolerating it land",
        "spec": _spec(
            [req(FAMILY, "In", "g5", "g6"), req(CAPACITY, "In", "on-demand")],
            limits={kube_gpu.GPU_RESOURCE: "24"}, weight=40,
            taints=[GPU_TAINT, {"key": "workload-type", "value": "inference", "effect": "NoSchedule"}],
            startup_taints=[{"key": "example.com/warming", "effect": "NoSchedule"}],
            policy="WhenEmpty", after="15m", budgets=[{"nodes": "1", "reasons": ["Drifted"]}],
            labels={"workload-type": "inference"}),
    },
}


def example_spec(name: str) -> dict[str, Any]:
    return copy.deepcopy(EXAMPLES[name]["spec"])


def nodepool_object(name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name, **({"labels": labels} if labels else {})}, "spec": spec}
