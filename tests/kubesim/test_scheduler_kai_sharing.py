"""The emulator's KAI Scheduler shares GPUs as KAI's docs/gpu-sharing/README.md describes: a pod asking
``gpu-fraction`` or ``gpu-memory`` by annotation (no ``nvidia.com/gpu``) lands on a shared GPU, which a
reservation pod in ``kai-resource-reservation`` holds whole, the sharers grouped by the ``runai-gpu-group``
label; its queue counts the fraction. KAI's MIG pods count their compute slices. All over HTTP with the
official client, the controller loop ticking on a manual clock."""
from __future__ import annotations

from kubernetes import client

from kubesim import KubeEmulator, make_node

NS = "inference"
RESERVATIONS = "kai-resource-reservation"
QUEUES = ("scheduling.run.ai", "v2", "queues")


def queue(api: client.ApiClient, name: str, gpu_quota: float) -> None:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    client.CustomObjectsApi(api).create_cluster_custom_object(*QUEUES, {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
        "spec": {"resources": {"gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                               "cpu": unlimited, "memory": unlimited}}})


def sharing_pod(api: client.ApiClient, name: str, *, queue_name: str = "team", fraction: str | None = "0.5",
                memory: str | None = None, resources: dict | None = None) -> None:
    annotations = {}
    if fraction is not None:
        annotations["gpu-fraction"] = fraction
    if memory is not None:
        annotations["gpu-memory"] = memory
    client.CoreV1Api(api).create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue_name}, "annotations": annotations},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{
            "name": "gpu-workload", "image": "nvidia/cuda:13.0.2-base-ubi8",
            "resources": resources or {"requests": {"cpu": "1", "memory": "1Gi"}}}]}})


def settle(emu: KubeEmulator, ticks: int = 4) -> None:
    for _ in range(ticks):
        emu.tick()
        emu.clock.advance(1)


def pods(api: client.ApiClient, namespace: str = NS) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items}


def reservations(api: client.ApiClient) -> list[client.V1Pod]:
    return [p for p in client.CoreV1Api(api).list_namespaced_pod(RESERVATIONS).items
            if not p.metadata.deletion_timestamp]


def queue_status(api: client.ApiClient, name: str) -> dict:
    return client.CustomObjectsApi(api).get_cluster_custom_object(*QUEUES, name).get("status") or {}


def test_two_half_gpu_pods_share_one_gpu_held_by_one_reservation_pod(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("gpu-1", gpus=1))
    queue(api, "team", 2)
    for name in ("half-a", "half-b", "half-c"):
        sharing_pod(api, name)
    settle(emu)
    found = pods(api)
    assert found["half-a"].spec.node_name == found["half-b"].spec.node_name == "gpu-1"
    assert found["half-c"].spec.node_name is None  # the one GPU is full: it waits
    group = found["half-a"].metadata.labels["runai-gpu-group"]
    assert found["half-b"].metadata.labels["runai-gpu-group"] == group
    held = reservations(api)
    assert len(held) == 1
    reservation = held[0]
    assert reservation.metadata.name.startswith("gpu-reservation-")
    assert reservation.metadata.labels == {"app": "kai-resource-reservation", "runai-gpu-group": group}
    assert reservation.spec.node_name == "gpu-1"
    assert reservation.spec.containers[0].resources.requests["nvidia.com/gpu"] == "1"
    assert reservation.status.phase == "Running"
    waiting = next(c for c in found["half-c"].status.conditions if c.type == "PodScheduled")
    assert waiting.status == "False" and "GPU" in waiting.message
    status = queue_status(api, "team")
    assert status["allocated"]["nvidia.com/gpu"] == "1"  # 0.5 + 0.5
    assert status["requested"]["nvidia.com/gpu"] == "1.5"

    # One sharer ends: the third takes its half of the same GPU.
    client.CoreV1Api(api).delete_namespaced_pod("half-a", NS)
    settle(emu)
    found = pods(api)
    assert "half-a" not in found
    assert found["half-c"].spec.node_name == "gpu-1"
    assert found["half-c"].metadata.labels["runai-gpu-group"] == group
    assert len(reservations(api)) == 1

    # Every sharer gone: the reservation pod goes, the GPU is whole again for anyone.
    for name in ("half-b", "half-c"):
        client.CoreV1Api(api).delete_namespaced_pod(name, NS)
    settle(emu)
    assert reservations(api) == []
    assert queue_status(api, "team")["allocated"]["nvidia.com/gpu"] == "0"


def test_a_third_half_lands_on_another_gpu_with_its_own_reservation(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("gpu-1", gpus=2))
    queue(api, "team", 2)
    for name in ("half-a", "half-b", "half-c"):
        sharing_pod(api, name)
    settle(emu)
    found = pods(api)
    assert all(p.spec.node_name == "gpu-1" for p in found.values())
    groups = [p.metadata.labels["runai-gpu-group"] for p in found.values()]
    assert len(set(groups)) == 2 and sorted(groups.count(g) for g in set(groups)) == [1, 2]
    held = reservations(api)
    assert len(held) == 2
    assert {r.metadata.labels["runai-gpu-group"] for r in held} == set(groups)
    assert {r.metadata.annotations["run.ai/reserve_for_gpu_index"] for r in held} == {"0", "1"}
    assert queue_status(api, "team")["allocated"]["nvidia.com/gpu"] == "1.5"


def test_the_default_scheduler_does_not_take_a_shared_gpu(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("gpu-1", gpus=1))
    queue(api, "team", 1)
    sharing_pod(api, "quarter", fraction="0.25")
    settle(emu)
    client.CoreV1Api(api).create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "whole"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    settle(emu)
    found = pods(api)
    assert found["quarter"].spec.node_name == "gpu-1"
    assert found["whole"].spec.node_name is None
    message = next(c for c in found["whole"].status.conditions if c.type == "PodScheduled").message
    assert "Insufficient nvidia.com/gpu" in message


def test_a_gpu_memory_pod_takes_its_share_of_the_nodes_gpu_memory(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("gpu-1", gpus=1))  # A100 80GB: nvidia.com/gpu.memory 81920 MiB
    queue(api, "team", 1)
    sharing_pod(api, "big", fraction=None, memory="40960")
    sharing_pod(api, "small", fraction=None, memory="20480")
    sharing_pod(api, "too-much", fraction=None, memory="30000")
    settle(emu)
    found = pods(api)
    assert found["big"].spec.node_name == found["small"].spec.node_name == "gpu-1"
    assert found["too-much"].spec.node_name is None  # 0.5 + 0.25 + 0.37 > 1
    assert len(reservations(api)) == 1
    assert queue_status(api, "team")["allocated"]["nvidia.com/gpu"] == "0.75"


def test_a_bad_fraction_is_refused_with_the_annotation_named(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("gpu-1", gpus=1))
    queue(api, "team", 1)
    sharing_pod(api, "greedy", fraction="1.5")
    settle(emu)
    pod = pods(api)["greedy"]
    assert pod.spec.node_name is None
    message = next(c for c in pod.status.conditions if c.type == "PodScheduled").message
    assert "gpu-fraction" in message and "1.5" in message
    assert reservations(api) == []


def test_no_fraction_lands_on_a_mig_node(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("mig-1", gpus=8, mig_config="all-balanced"))
    queue(api, "team", 8)
    sharing_pod(api, "half")
    settle(emu)
    assert pods(api)["half"].spec.node_name is None
    assert reservations(api) == []


def test_kai_places_mig_pods_and_counts_their_compute_slices(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("mig-1", gpus=1, mig_config="all-balanced"))  # 2 × 1g.10gb, 2g.20gb, 3g.40gb
    queue(api, "team", 8)
    for name, profile in (("slice-a", "1g.10gb"), ("slice-b", "1g.10gb"), ("slice-c", "1g.10gb"),
                          ("medium", "3g.40gb")):
        sharing_pod(api, name, fraction=None, resources={"limits": {f"nvidia.com/mig-{profile}": "1"}})
    settle(emu)
    found = pods(api)
    assert found["slice-a"].spec.node_name == found["slice-b"].spec.node_name == found["medium"].spec.node_name == "mig-1"
    assert found["slice-c"].spec.node_name is None
    message = next(c for c in found["slice-c"].status.conditions if c.type == "PodScheduled").message
    assert "nvidia.com/mig-1g.10gb" in message
    # KAI's quota counts a MIG device by its compute slices (GetGpusQuota): 1 + 1 + 3.
    assert queue_status(api, "team")["allocated"]["nvidia.com/gpu"] == "5"
    assert reservations(api) == []


def test_a_cpu_only_pod_goes_to_a_cpu_node_before_a_mig_node(manual_sim: KubeEmulator, manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("a-mig", gpus=8, mig_config="all-balanced"))  # first by name, no nvidia.com/gpu
    emu.add_node(make_node("z-cpu"))
    queue(api, "team", 1)
    sharing_pod(api, "web", fraction=None)
    settle(emu)
    assert pods(api)["web"].spec.node_name == "z-cpu"


def test_a_whole_gpu_pod_does_not_take_the_uncut_gpus_of_a_mixed_mig_node(manual_sim: KubeEmulator,
                                                                         manual_api) -> None:
    emu, api = manual_sim, manual_api
    node = make_node("mig-1", gpus=2, mig_config="all-balanced")
    node["status"]["allocatable"]["nvidia.com/gpu"] = node["status"]["capacity"]["nvidia.com/gpu"] = "1"  # one uncut
    emu.add_node(node)
    queue(api, "team", 8)
    sharing_pod(api, "whole", fraction=None, resources={"limits": {"nvidia.com/gpu": "1"}})
    sharing_pod(api, "slice", fraction=None, resources={"limits": {"nvidia.com/mig-1g.10gb": "1"}})
    settle(emu)
    found = pods(api)
    assert found["slice"].spec.node_name == "mig-1"
    assert found["whole"].spec.node_name is None
    message = next(c for c in found["whole"].status.conditions if c.type == "PodScheduled").message
    assert "non MIG jobs cant run on a node with MigStrategy='mixed'" in message


def test_a_queue_within_its_quota_reclaims_a_shared_gpu_from_fractions_over_quota(manual_sim: KubeEmulator,
                                                                                  manual_api) -> None:
    emu, api = manual_sim, manual_api
    emu.add_node(make_node("gpu-1", gpus=1))
    queue(api, "borrower", 0)
    queue(api, "owner", 1)
    sharing_pod(api, "half-a", queue_name="borrower")
    sharing_pod(api, "half-b", queue_name="borrower")
    settle(emu)
    assert {p.spec.node_name for p in pods(api).values()} == {"gpu-1"}
    assert len(reservations(api)) == 1
    sharing_pod(api, "trainer", queue_name="owner", fraction=None,
                resources={"limits": {"nvidia.com/gpu": "1"}})
    settle(emu, ticks=8)
    found = pods(api)
    assert found["trainer"].spec.node_name == "gpu-1"
    assert "half-a" not in found and "half-b" not in found  # reclaimed: both halves of the GPU went
    assert reservations(api) == []
    assert queue_status(api, "borrower")["allocated"]["nvidia.com/gpu"] == "0"
    assert queue_status(api, "owner")["allocated"]["nvidia.com/gpu"] == "1"
