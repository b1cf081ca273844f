"""NVIDIA's device plugin choosing its configuration by node label, on the emulated GPU nodes: a node labelled
``nvidia.com/device-plugin.config=<name>`` publishes its GPUs as the configuration ``<name>`` of the device
plugin's ConfigMap says (time-slicing or MPS replicas).

Written from NVIDIA/k8s-device-plugin ``README.md`` ("Shared Access to GPUs", "With CUDA Time-Slicing",
"Updating Per-Node Configuration With a Node Label": several configurations in one ConfigMap, each a key;
the label ``nvidia.com/device-plugin.config`` names the one a node uses, the plugin's config manager
restarts the plugin with it) and the GPU Operator's "Time-Slicing GPUs in Kubernetes" page (the ConfigMap
``time-slicing-config`` in the namespace ``gpu-operator``, named in the ClusterPolicy's
``devicePlugin.config.name``). A configuration::

    version: v1
    sharing:
      timeSlicing:            # or mps
        renameByDefault: false
        resources:
        - name: nvidia.com/gpu
          replicas: 4

The plugin then advertises physical × replicas ``nvidia.com/gpu`` (``nvidia.com/gpu.shared`` with
``renameByDefault: true``) and GPU feature discovery the labels of :func:`kubesim.nvidia.exposure`. A name the
ConfigMap does not have, or a configuration that cannot be read, leaves the node as it is (the real config
manager fails to start the plugin; no label reports it). Nodes whose GPUs are MIG-cut are left to the MIG
manager (time-sliced MIG slices are not emulated).

Runs in the controller loop (:meth:`kubesim.controllers.ControllersMixin.tick`).
"""
from __future__ import annotations

import orjson
import yaml

from kube import gpu as kgpu
import kubesim.nvidia as nvidia
from kubesim.errors import ApiError
from kubesim.resources import NODES
from kubesim.util import Obj

CONFIG_LABEL = kgpu.LABEL_DEVICE_PLUGIN_CONFIG


def sharing_of(text: str) -> tuple[int, str, bool] | None:
    """(replicas, strategy, renamed) of one configuration's YAML text for ``nvidia.com/gpu``; None when it
    cannot be read. No sharing section: 1 replica."""
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return None
    if not isinstance(config, dict):
        return None
    sharing = config.get("sharing") or {}
    if not isinstance(sharing, dict):
        return None
    for key, strategy in (("timeSlicing", kgpu.SHARING_TIME_SLICING), ("mps", kgpu.SHARING_MPS)):
        section = sharing.get(key)
        if not isinstance(section, dict):
            continue
        for resource in section.get("resources") or ():
            if isinstance(resource, dict) and resource.get("name") == nvidia.GPU:
                try:
                    replicas = int(resource.get("replicas", 1))
                except (TypeError, ValueError):
                    return None
                if replicas < 1:
                    return None
                return replicas, strategy, bool(section.get("renameByDefault", False))
    return 1, kgpu.SHARING_NONE, False


class DevicePluginMixin:
    """Part of :class:`kubesim.KubeEmulator`: the device plugin's per-node configuration."""

    #: The device plugin's ConfigMap (namespace, name): the ClusterPolicy's ``devicePlugin.config.name``.
    device_plugin_config_map: tuple[str, str] = ("gpu-operator", "time-slicing-config")

    def device_plugin_step(self) -> list[str]:
        """Publish every labelled node's GPUs as its configuration says; returns what changed."""
        rv = (self._kind_rv.get(NODES, 0), self._kind_rv.get("configmaps", 0))  # type: ignore[attr-defined]
        if getattr(self, "_device_plugin_seen", None) == rv:
            return []
        self._device_plugin_seen = rv
        nodes = self._device_plugin_nodes()
        if not nodes:
            return []
        namespace, name = self.device_plugin_config_map
        config_map = self.get("configmaps", name, namespace) or {}  # type: ignore[attr-defined]
        data = config_map.get("data") or {}
        done: list[str] = []
        for node in nodes:
            md = node["metadata"]
            wanted = (md.get("labels") or {}).get(CONFIG_LABEL, "")
            hardware = nvidia.parse_hardware((md.get("annotations") or {}).get(nvidia.HARDWARE_ANNOTATION, ""))
            applied_mig = (md.get("annotations") or {}).get(nvidia.APPLIED_ANNOTATION) or nvidia.DISABLED
            if hardware is None or applied_mig != nvidia.DISABLED or wanted not in data:
                continue
            sharing = sharing_of(str(data[wanted]))
            if sharing is None:
                continue
            if self._device_plugin_publish(node, hardware, sharing):
                done.append(f"device-plugin: {md['name']} {wanted}")
        self._device_plugin_seen = (self._kind_rv.get(NODES, 0), self._kind_rv.get("configmaps", 0))  # type: ignore[attr-defined]
        return done

    def _device_plugin_nodes(self) -> list[Obj]:
        with self._lock:  # type: ignore[attr-defined]
            entries = self._stores[NODES].entries  # type: ignore[attr-defined]
            found = [data for _key, (data, _rv, labels, _fields) in entries.items()
                     if any(k == CONFIG_LABEL for k, _ in labels)]
        return [orjson.loads(data) for data in found]

    def _device_plugin_publish(self, node: Obj, hardware: tuple[int, str, int, str],
                               sharing: tuple[int, str, bool]) -> bool:
        gpus, product, memory, family = hardware
        replicas, strategy, renamed = sharing
        labels_now = node["metadata"].get("labels") or {}
        new_labels, resources = nvidia.exposure(
            gpus=gpus, product=product, memory_mib=memory, family=family, replicas=replicas,
            sharing_strategy=strategy if replicas > 1 else None, rename_shared=renamed,
            mig_strategy=labels_now.get(nvidia.MIG_STRATEGY_LABEL))
        current_labels = {k: v for k, v in labels_now.items() if nvidia.is_exposure_label(k)}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        current_resources = {k: v for k, v in allocatable.items() if nvidia.is_exposure_resource(k)}
        wanted_labels = {k: v for k, v in new_labels.items() if nvidia.is_exposure_label(k)}
        if current_labels == wanted_labels and current_resources == resources:
            return False

        def change(obj: Obj) -> None:
            labels = obj["metadata"].setdefault("labels", {})
            for key in [k for k in labels if nvidia.is_exposure_label(k)]:
                del labels[key]
            labels.update(wanted_labels)
            status = obj.setdefault("status", {})
            for field in ("capacity", "allocatable"):
                values = status.setdefault(field, {})
                for resource in [r for r in values if nvidia.is_exposure_resource(r)]:
                    del values[resource]
                values.update(resources)

        try:
            self.update_node(node["metadata"]["name"], change)  # type: ignore[attr-defined]
        except (ApiError, ValueError):
            return False
        return True
