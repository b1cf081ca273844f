"""NVIDIA's device plugin on the emulated nodes: the configuration a node's ``nvidia.com/device-plugin.config``
label names in the plugin's ConfigMap decides how its GPUs are published (time-slicing, MPS, renamed), over
the real client."""
from __future__ import annotations

from typing import Any

from kubernetes import client

from kube import gpu as kgpu
from kubesim import KubeEmulator, make_node
from kubesim.device_plugin import sharing_of

CONFIGS = {
    "time-sliced-4": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
    "shared-2": ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                 "    - name: nvidia.com/gpu\n      replicas: 2\n"),
    "whole": "version: v1\n",
    "broken": "sharing: [",
}


def gpu_resources(node) -> dict[str, str]:
    return {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/")}


def setup(emu: KubeEmulator) -> None:
    emu.add_namespace("gpu-operator")
    emu.upsert("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "time-slicing-config", "namespace": "gpu-operator"},
                              "data": CONFIGS})
    emu.add_node(make_node("g-1", gpus=4, gpu_product="Tesla-T4"))


def label(api: Any, value: str) -> None:
    client.CoreV1Api(api).patch_node("g-1", {"metadata": {"labels": {kgpu.LABEL_DEVICE_PLUGIN_CONFIG: value}}})


def read(api: Any):
    return client.CoreV1Api(api).read_node("g-1")


def test_a_configuration_is_read_as_its_replicas_strategy_and_renaming():
    assert sharing_of(CONFIGS["time-sliced-4"]) == (4, "time-slicing", False)
    assert sharing_of(CONFIGS["shared-2"]) == (2, "time-slicing", True)
    assert sharing_of(CONFIGS["whole"]) == (1, "none", False)
    assert sharing_of(CONFIGS["broken"]) is None
    assert sharing_of("sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n") is None


def test_the_label_picks_the_configuration_and_back(manual_sim: KubeEmulator, manual_api) -> None:
    emu = manual_sim
    setup(emu)
    label(manual_api, "time-sliced-4")
    emu.tick()
    node = read(manual_api)
    assert gpu_resources(node) == {"nvidia.com/gpu": "16"}
    assert node.metadata.labels[kgpu.LABEL_GPU_REPLICAS] == "4"
    assert node.metadata.labels[kgpu.LABEL_SHARING_STRATEGY] == "time-slicing"
    assert node.metadata.labels[kgpu.LABEL_GPU_PRODUCT] == "Tesla-T4-SHARED"
    label(manual_api, "shared-2")
    emu.tick()
    assert gpu_resources(read(manual_api)) == {"nvidia.com/gpu.shared": "8"}
    label(manual_api, "whole")
    emu.tick()
    node = read(manual_api)
    assert gpu_resources(node) == {"nvidia.com/gpu": "4"}
    assert node.metadata.labels[kgpu.LABEL_GPU_REPLICAS] == "1"


def test_a_name_the_configmap_lacks_or_cannot_be_read_leaves_the_node(manual_sim: KubeEmulator, manual_api) -> None:
    emu = manual_sim
    setup(emu)
    for value in ("no-such-config", "broken"):
        label(manual_api, value)
        emu.tick()
        assert gpu_resources(read(manual_api)) == {"nvidia.com/gpu": "4"}
