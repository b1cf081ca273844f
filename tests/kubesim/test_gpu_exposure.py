"""The emulator's GPU nodes as NVIDIA's device plugin and GPU feature discovery publish them (whole, MIG
single, MIG mixed, time-slicing, MPS, renamed ``nvidia.com/gpu.shared``), NVIDIA's MIG manager applying a
new ``nvidia.com/mig.config`` layout on the manual clock, and the default scheduler fitting the MIG and
shared resources as extended resources — all read back over HTTP with the official client or kubectl."""
from __future__ import annotations

import pytest
from kubernetes import client

from kubesim import KubeEmulator, make_node, make_pod

MIXED_BALANCED = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-2g.20gb": "8",
                  "nvidia.com/mig-3g.40gb": "8"}


def gpu_resources(node: client.V1Node, field: str = "allocatable") -> dict[str, str]:
    values = getattr(node.status, field) or {}
    return {k: v for k, v in values.items() if k.startswith("nvidia.com/")}


def read_node(api: client.ApiClient, name: str) -> client.V1Node:
    return client.CoreV1Api(api).read_node(name)


def test_each_exposure_is_published_as_nvidia_documents_it(sim: KubeEmulator) -> None:
    sim.add_node(make_node("whole", gpus=8))
    sim.add_node(make_node("mixed", gpus=8, mig_config="all-balanced"))
    sim.add_node(make_node("single", gpus=8, mig_config="all-1g.10gb", mig_strategy="single"))
    sim.add_node(make_node("sliced", gpus=8, gpu_replicas=4))
    sim.add_node(make_node("mps", gpus=8, gpu_replicas=4, sharing_strategy="mps", rename_shared=True))
    configuration = client.Configuration(host=sim.url)
    with client.ApiClient(configuration) as api:
        whole = read_node(api, "whole")
        assert gpu_resources(whole) == {"nvidia.com/gpu": "8"}
        assert whole.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert whole.metadata.labels["nvidia.com/gpu.count"] == "8"
        assert whole.metadata.labels["nvidia.com/gpu.sharing-strategy"] == "none"

        mixed = read_node(api, "mixed")
        assert gpu_resources(mixed) == gpu_resources(mixed, "capacity") == MIXED_BALANCED
        labels = mixed.metadata.labels
        assert labels["nvidia.com/mig.strategy"] == "mixed"
        assert labels["nvidia.com/mig.config"] == "all-balanced"
        assert labels["nvidia.com/mig.config.state"] == "success"
        assert labels["nvidia.com/gpu.count"] == "8"  # the physical GPUs
        assert labels["nvidia.com/mig-1g.10gb.count"] == "16"
        assert labels["nvidia.com/mig-1g.10gb.memory"] == "10240"
        assert labels["nvidia.com/mig-3g.40gb.count"] == "8"
        assert labels["nvidia.com/mig-3g.40gb.memory"] == "40960"
        assert labels["nvidia.com/mig-3g.40gb.slices.gi"] == "3"

        single = read_node(api, "single")
        assert gpu_resources(single) == {"nvidia.com/gpu": "56"}
        labels = single.metadata.labels
        assert labels["nvidia.com/mig.strategy"] == "single"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
        assert labels["nvidia.com/gpu.count"] == "56"
        assert labels["nvidia.com/gpu.memory"] == "10240"
        assert labels["nvidia.com/gpu.slices.gi"] == "1"

        sliced = read_node(api, "sliced")
        assert gpu_resources(sliced) == {"nvidia.com/gpu": "32"}
        labels = sliced.metadata.labels
        assert labels["nvidia.com/gpu.replicas"] == "4"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-SHARED"
        assert labels["nvidia.com/gpu.count"] == "8"

        mps = read_node(api, "mps")
        assert gpu_resources(mps) == {"nvidia.com/gpu.shared": "32"}
        assert mps.metadata.labels["nvidia.com/gpu.sharing-strategy"] == "mps"
        assert mps.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"  # renamed: no -SHARED


def test_a_layout_the_gpu_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match="all-3g.40gb"):
        make_node("t4", gpus=1, gpu_product="Tesla-T4", mig_config="all-3g.40gb")
    with pytest.raises(ValueError, match="single"):
        make_node("a100", gpus=8, mig_config="all-balanced", mig_strategy="single")


def test_kubectl_describe_shows_the_slices(sim: KubeEmulator, kubectl) -> None:
    sim.add_node(make_node("mixed", gpus=8, mig_config="all-balanced"))
    out = kubectl("describe", "node", "mixed").stdout
    assert "nvidia.com/mig-1g.10gb:" in out and "16" in out.split("nvidia.com/mig-1g.10gb:")[1].split("\n")[0]
    assert "nvidia.com/mig.config=all-balanced" in out
    wide = kubectl("get", "nodes", "-L", "nvidia.com/mig.config,nvidia.com/mig.config.state").stdout
    assert "all-balanced" in wide and "success" in wide


def test_the_default_scheduler_fits_mig_and_shared_resources_as_extended_resources(manual_sim: KubeEmulator,
                                                                                   manual_api) -> None:
    emu = manual_sim
    emu.add_node(make_node("mixed", gpus=1, mig_config="all-balanced"))  # 2 × 1g.10gb, 1 × 2g, 1 × 3g
    emu.add_node(make_node("shared", gpus=1, gpu_replicas=2, rename_shared=True))
    core = client.CoreV1Api(manual_api)
    for i in range(3):
        emu.add_pod(make_pod(f"small-{i}", "ml", phase="Pending",
                             containers=[{"name": "main", "requests": {"nvidia.com/mig-1g.10gb": 1}}]))
    for i in range(3):
        emu.add_pod(make_pod(f"replica-{i}", "ml", phase="Pending",
                             containers=[{"name": "main", "requests": {"nvidia.com/gpu.shared": 1}}]))
    emu.tick()
    emu.clock.advance(1)
    emu.tick()
    pods = {p.metadata.name: p for p in core.list_namespaced_pod("ml").items}
    assert pods["small-0"].spec.node_name == pods["small-1"].spec.node_name == "mixed"
    assert pods["small-2"].spec.node_name is None
    waiting = next(c for c in pods["small-2"].status.conditions if c.type == "PodScheduled")
    assert "Insufficient nvidia.com/mig-1g.10gb" in waiting.message
    assert pods["replica-0"].spec.node_name == pods["replica-1"].spec.node_name == "shared"
    assert pods["replica-2"].spec.node_name is None


# ---------------------------------------------------------------------------------------------------
# NVIDIA's MIG manager


def test_the_mig_manager_drains_then_publishes_the_new_layout(manual_sim: KubeEmulator, manual_api) -> None:
    emu = manual_sim
    emu.add_node(make_node("a100", gpus=8))
    core = client.CoreV1Api(manual_api)
    emu.add_pod(make_pod("trainer", "ml", node="a100", phase="Running",
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": 2}}]))
    emu.add_pod(make_pod("web", "ml", node="a100", phase="Running",
                         containers=[{"name": "main", "requests": {"cpu": "1"}}]))
    core.patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}})
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "pending"
    assert gpu_resources(node) == {"nvidia.com/gpu": "0"}  # the device plugin is down meanwhile
    trainer = core.read_namespaced_pod("trainer", "ml")
    assert trainer.metadata.deletion_timestamp is not None  # evicted: the GPU pods go first
    evicted = core.list_namespaced_event("ml", field_selector="reason=Evicted,involvedObject.name=trainer").items
    assert evicted and "all-balanced" in evicted[0].message
    assert core.read_namespaced_pod("web", "ml").metadata.deletion_timestamp is None  # no GPU: stays

    emu.clock.advance(10)
    emu.tick()
    assert read_node(manual_api, "a100").metadata.labels["nvidia.com/mig.config.state"] == "pending"
    emu.clock.advance(25)
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert gpu_resources(node) == gpu_resources(node, "capacity") == MIXED_BALANCED
    assert node.metadata.labels["nvidia.com/mig-2g.20gb.count"] == "8"
    assert node.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert node.metadata.labels["nvidia.com/gpu.count"] == "8"

    # Back to whole GPUs.
    core.patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-disabled"}}})
    emu.tick()
    assert read_node(manual_api, "a100").metadata.labels["nvidia.com/mig.config.state"] == "pending"
    emu.clock.advance(31)
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert gpu_resources(node) == {"nvidia.com/gpu": "8"}
    assert not any(k.startswith("nvidia.com/mig-") for k in node.metadata.labels)


def test_the_mig_manager_waits_while_a_gpu_pod_runs_on_the_node(manual_sim: KubeEmulator, manual_api) -> None:
    emu = manual_sim
    emu.add_node(make_node("a100", gpus=8))
    core = client.CoreV1Api(manual_api)
    core.patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}})
    emu.tick()
    # A pod bound by name meanwhile (no scheduler asked): the geometry cannot change under it.
    emu.add_pod(make_pod("pinned", "ml", node="a100", phase="Running",
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": 1}}]))
    for _ in range(3):
        emu.clock.advance(60)
        emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "pending"
    assert "nvidia.com/mig-1g.10gb" not in gpu_resources(node)
    core.delete_namespaced_pod("pinned", "ml")
    emu.tick()
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert gpu_resources(node) == {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}


def test_the_mig_manager_reboots_when_the_mig_mode_changes(manual_sim: KubeEmulator, manual_api) -> None:
    emu = manual_sim
    emu.mig_manager_reboot = True
    emu.add_node(make_node("a100", gpus=4))
    client.CoreV1Api(manual_api).patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.40gb"}}})
    emu.tick()
    emu.clock.advance(30)
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "rebooting"
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "False"
    emu.clock.advance(120)
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert next(c for c in node.status.conditions if c.type == "Ready").status == "True"
    assert gpu_resources(node) == {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "8"}
    # A layout of the same mode: no reboot.
    client.CoreV1Api(manual_api).patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}})
    emu.tick()
    emu.clock.advance(30)
    emu.tick()
    assert read_node(manual_api, "a100").metadata.labels["nvidia.com/mig.config.state"] == "success"


def test_an_unknown_layout_fails_and_changes_nothing(manual_sim: KubeEmulator, manual_api) -> None:
    emu = manual_sim
    emu.add_node(make_node("a100", gpus=8, mig_config="all-balanced"))
    emu.add_pod(make_pod("inference", "ml", node="a100", phase="Running",
                         containers=[{"name": "main", "requests": {"nvidia.com/mig-1g.10gb": 1}}]))
    core = client.CoreV1Api(manual_api)
    core.patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-9g.99gb"}}})
    emu.tick()
    emu.clock.advance(60)
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "failed"
    assert gpu_resources(node) == MIXED_BALANCED
    assert core.read_namespaced_pod("inference", "ml").metadata.deletion_timestamp is None


def control(sim: KubeEmulator, op: str, **body) -> object:
    import json
    import urllib.request

    request = urllib.request.Request(f"{sim.url}/_emulator/{op}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")["result"]


def test_over_the_control_surface_a_shared_node_is_made_and_the_mig_manager_is_timed(manual_sim: KubeEmulator,
                                                                                      manual_api) -> None:
    emu = manual_sim
    control(emu, "add_node", make={"name": "a100", "gpus": 4, "gpu_replicas": 2})
    assert gpu_resources(read_node(manual_api, "a100")) == {"nvidia.com/gpu": "8"}
    assert control(emu, "set_mig_manager", seconds=[5, 0]) == {"seconds": [5.0, 0.0], "reboot": False}
    client.CoreV1Api(manual_api).patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-2g.20gb"}}})
    control(emu, "tick")
    control(emu, "advance_clock", seconds=5)
    control(emu, "tick")
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    # The GPUs are cut now: no replicas any more, 3 × 2g.20gb per GPU.
    assert gpu_resources(node) == {"nvidia.com/gpu": "0", "nvidia.com/mig-2g.20gb": "12"}
    assert node.metadata.labels["nvidia.com/gpu.replicas"] == "1"
    assert "-SHARED" not in node.metadata.labels["nvidia.com/gpu.product"]


def test_the_shared_fleet_has_mig_and_time_sliced_pools_whose_pods_never_overcommit() -> None:
    from collections import Counter

    from kube import requests as kube_requests
    from kubesim import generate_cluster

    nodes, pods = generate_cluster(18, 600, seed=1, shared=True)
    pools = Counter(n["metadata"]["labels"]["karpenter.sh/nodepool"] for n in nodes)
    assert {"a100-mig", "h100-mig", "l4-shared"} <= set(pools)
    mig = next(n for n in nodes if n["metadata"]["labels"]["karpenter.sh/nodepool"] == "a100-mig")
    assert {k: v for k, v in mig["status"]["allocatable"].items() if k.startswith("nvidia.com/")} == MIXED_BALANCED
    held: dict[tuple[str, str], int] = Counter()
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and pod["status"]["phase"] == "Running":
            for name, value in kube_requests.pod_requests(pod).items():
                if name.startswith("nvidia.com/"):
                    held[(node, name)] += int(value)
    allocatable = {(n["metadata"]["name"], k): int(v) for n in nodes for k, v in n["status"]["allocatable"].items()
                   if k.startswith("nvidia.com/")}
    assert any(name.startswith("nvidia.com/mig-") for _, name in held)
    assert all(count <= allocatable.get(key, 0) for key, count in held.items())
    # Without shared=True the fleet is the one it always was: six pools of whole GPUs.
    plain, _ = generate_cluster(18, 10, seed=1)
    assert len({n["metadata"]["labels"]["karpenter.sh/nodepool"] for n in plain}) == 6


def test_a_layout_asked_back_while_pending_keeps_the_gpus_as_they_are(manual_sim: KubeEmulator, manual_api) -> None:
    emu = manual_sim
    emu.add_node(make_node("a100", gpus=8, mig_config="all-balanced"))
    core = client.CoreV1Api(manual_api)
    core.patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-7g.80gb"}}})
    emu.tick()
    assert read_node(manual_api, "a100").metadata.labels["nvidia.com/mig.config.state"] == "pending"
    core.patch_node("a100", {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}})
    emu.tick()
    node = read_node(manual_api, "a100")
    assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
    assert gpu_resources(node) == MIXED_BALANCED
    emu.clock.advance(60)
    emu.tick()
    assert gpu_resources(read_node(manual_api, "a100")) == MIXED_BALANCED
