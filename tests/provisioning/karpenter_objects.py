"""Karpenter objects (karpenter.sh/v1) for the provisioning tests, as the API server returns them."""
from __future__ import annotations

import contextlib

from kubesim import make_pod

NODE_CLASS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def nodepool(name, *, requirements=(), taints=(), startup_taints=(), labels=None, limits=None, weight=None,
             disruption=None, resources=None, nodes=None):
    spec = {"template": {"spec": {"nodeClassRef": dict(NODE_CLASS), "requirements": [dict(r) for r in requirements]}}}
    if taints:
        spec["template"]["spec"]["taints"] = [dict(t) for t in taints]
    if startup_taints:
        spec["template"]["spec"]["startupTaints"] = [dict(t) for t in startup_taints]
    if labels:
        spec["template"]["metadata"] = {"labels": dict(labels)}
    if limits:
        spec["limits"] = dict(limits)
    if weight is not None:
        spec["weight"] = weight
    if disruption is not None:
        spec["disruption"] = disruption
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}
    if resources is not None or nodes is not None:
        pool["status"] = {"resources": dict(resources or {}), "nodes": nodes or 0}
    return pool


def req(key, operator, *values):
    out = {"key": key, "operator": operator}
    if values:
        out["values"] = [str(v) for v in values]
    return out


def gpu_pod(name="train", namespace="ml", *, gpus=1, selector=None, affinity=None, tolerate_gpu=True,
            tolerations=None, priority=50, phase="Pending", node=None):
    pod = make_pod(name, namespace, phase=phase, node=node, priority=priority,
                   containers=[{"name": "main", "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus}}])
    spec = pod["spec"]
    if not tolerate_gpu:
        spec["tolerations"] = [t for t in spec["tolerations"] if t.get("key") != "nvidia.com/gpu"]
    if tolerations:
        spec["tolerations"] += [dict(t) for t in tolerations]
    if selector:
        spec["nodeSelector"] = dict(selector)
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [dict(e) for e in term]} for term in affinity]}}}
    return pod


@contextlib.contextmanager
def karpenter_emulator(emulators, org, tmp_path, *, nodepools, pods, backed="h100-prod"):
    """`org`'s cluster in an emulator of `emulators` (conftest's fixture: stopped after the test) with Karpenter
    `nodepools` and `pods` (in rnd-a's namespace), a pool backed by NodePool `backed`, mirrored by the real sync
    until every NodePool and pod is there. Yields (emulator, sync, pool)."""
    from nodepools import services
    from nodepools.sync import ClusterSync, SyncOptions
    from provisioning.models import KarpenterNodePool

    emu = emulators()
    sync = None
    try:
        emu.load(nodes=org.nodes, pods=org.pods, objects={"nodepools.karpenter.sh": list(nodepools)})
        emu.add_namespace("runai-rnd-a")
        for pod in pods:
            emu.add_pod(pod)
        services.cluster_update(actor=None, cluster=org.cluster, kube_context="emulator",
                                kubeconfig_path=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
        pool = services.pool_create(actor=None, cluster=org.cluster, name=backed,
                                    label_key="karpenter.sh/nodepool", label_value=backed)
        sync = ClusterSync(org.cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02,
                                                    tick=0.05, hint_interval=0.05, unreachable_after=2))
        sync.start()
        names = [p["metadata"]["name"] for p in pods]
        assert sync.run_until(lambda: KarpenterNodePool.objects.filter(cluster=org.cluster).count() == len(nodepools)
                              and org.cluster.pods.filter(name__in=names).count() == len(names))
        yield emu, sync, pool
    finally:
        if sync is not None:
            sync.stop()
