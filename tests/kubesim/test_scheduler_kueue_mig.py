"""Kueue in the emulator with MIG slices: a ClusterQueue covers a MIG resource (``nvidia.com/mig-1g.10gb``) of
a flavor as any other resource (Kueue's concepts, "Cluster Queue": ``coveredResources`` and a
``nominalQuota`` per flavor and resource), admits a Job's Workload while the slices' quota lasts, and the
default scheduler puts the admitted pods on the flavor's MIG node (mixed strategy). Over HTTP with the
official client, the controller loop ticking on a manual clock."""
from __future__ import annotations

from kubernetes import client

from kubesim import KubeEmulator, make_node

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NS = "inference"
SLICE = "nvidia.com/mig-1g.10gb"


def test_a_cluster_queue_counts_mig_slices_and_admits_within_their_quota(manual_sim: KubeEmulator,
                                                                          manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("mig-1", gpus=1, mig_config="all-1g.10gb", labels={"pool": "a100-mig"}))  # 7 slices
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": "a100-mig"},
        "spec": {"nodeLabels": {"pool": "a100-mig"}}})
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": "team"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", SLICE],
            "flavors": [{"name": "a100-mig", "resources": [{"name": "cpu", "nominalQuota": "16"},
                                                           {"name": SLICE, "nominalQuota": "3"}]}]}]}})
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": "team", "namespace": NS},
        "spec": {"clusterQueue": "team"}})
    batch = client.BatchV1Api(api)
    for name, slices in (("chat", 2), ("embed", 1), ("rerank", 1)):
        batch.create_namespaced_job(NS, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "team"}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "server", "image": "vllm:1",
                "resources": {"requests": {"cpu": "1"}, "limits": {SLICE: str(slices)}}}]}}}})
        emu.tick()
        emu.clock.advance(10)
    for _ in range(4):
        emu.tick()
        emu.clock.advance(10)
    pods = {p.metadata.labels["job-name"]: p for p in client.CoreV1Api(api).list_namespaced_pod(NS).items}
    assert pods["chat"].spec.node_name == pods["embed"].spec.node_name == "mig-1"
    assert "rerank" not in pods  # its Workload waits for quota: 2 + 1 of 3 slices are used
    assert batch.read_namespaced_job("rerank", NS).spec.suspend is True
    workloads = custom.list_namespaced_custom_object(GROUP, VERSION, NS, "workloads")["items"]
    waiting = next(w for w in workloads if w["metadata"]["ownerReferences"][0]["name"] == "rerank")
    quota = next(c for c in waiting["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert quota["status"] == "False" and SLICE in quota["message"]
    usage = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "team")["status"]["flavorsUsage"][0]
    assert next(r for r in usage["resources"] if r["name"] == SLICE)["total"] == "3"
