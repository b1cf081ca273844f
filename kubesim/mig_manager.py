"""NVIDIA's MIG manager on the emulated GPU nodes: a node whose ``nvidia.com/mig.config`` label names a new
layout gets it after a delay, with ``nvidia.com/mig.config.state`` telling where it is.

Written from NVIDIA/mig-parted ``pkg/mig/reconfigure/reconfigure.go`` (the manager's ``Run``) and
``deployments/container/reconfigure-mig.sh``, and the GPU Operator's "GPU Operator with MIG" page
(docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html: "MIG Manager ...
watches for changes to the MIG geometry and applies reconfiguration as needed"; with ``WITH_REBOOT`` the
node reboots when the MIG mode changes):

1. the layout is validated against the manager's configuration (the ``default-mig-parted-config`` layouts
   of the node's GPU, :func:`kubesim.nvidia.layout`): an unknown one sets the state ``failed`` and
   nothing else changes; one already applied sets ``success``;
2. the state becomes ``pending`` and the GPU clients stop (``shutdownKubernetesGPUClients``: the device
   plugin's pod goes, so the node's GPU resources are allocatable 0 meanwhile); the GPU pods on the node
   are evicted (the page asks that no GPU workload runs while the geometry changes — the emulator drains
   them as an administrator's ``kubectl drain`` of the GPU pods would, a Warning ``Evicted`` event each);
3. after :attr:`MigManagerMixin.mig_manager_seconds` [0] and once no GPU pod is left on the node, the new
   geometry is applied; a change of MIG mode (from or to ``all-disabled``) with
   :attr:`MigManagerMixin.mig_manager_reboot` first sets ``rebooting`` and the node is NotReady for
   [1] seconds;
4. the device plugin and GPU feature discovery start again and publish the new resources and labels
   (:func:`kubesim.nvidia.exposure`, keeping the node's ``nvidia.com/mig.strategy``, default ``mixed``);
   the state becomes ``success``.

Runs in the controller loop (:meth:`kubesim.controllers.ControllersMixin.tick`) on the emulator's clock:
a test on a :class:`kubesim.clock.ManualClock` advances it and ticks.
"""
from __future__ import annotations

from typing import Any

import orjson

from kube import gpu as kgpu
from kube import requests as kube_requests
from kube.quantity import QuantityError
import kubesim.nvidia as nvidia
from kubesim.errors import ApiError
from kubesim.resources import NODES, PODS, get_resource
from kubesim.util import Obj

APPLIED_ANNOTATION = nvidia.APPLIED_ANNOTATION
COMPONENT = "nvidia-mig-manager"
KAI_SHARING_ANNOTATIONS = (kgpu.ANNOTATION_GPU_FRACTION, kgpu.ANNOTATION_GPU_MEMORY)
KAI_RESERVATION_NAMESPACE = kgpu.RESERVATION_NAMESPACE


def uses_gpu(pod: Obj) -> bool:
    """A pod holding GPUs of its node: it asks a GPU resource (whole, shared, MIG) or a KAI fraction."""
    md = pod.get("metadata") or {}
    if md.get("namespace") == KAI_RESERVATION_NAMESPACE:
        return True
    if any(k in (md.get("annotations") or {}) for k in KAI_SHARING_ANNOTATIONS):
        return True
    try:
        wanted = kube_requests.pod_requests(pod)
    except QuantityError:
        return False
    return any(nvidia.is_exposure_resource(name) and value > 0 for name, value in wanted.items())


class MigManagerMixin:
    """Part of :class:`kubesim.KubeEmulator`: the MIG manager of every GPU node."""

    #: Seconds from ``pending`` to the new geometry (drain, tear-down, mig-parted apply); then the reboot's.
    mig_manager_seconds: tuple[float, float] = (30.0, 120.0)
    #: The manager's ``WITH_REBOOT``: a change of MIG mode reboots the node.
    mig_manager_reboot: bool = False

    def _mig_state(self) -> dict[str, Any]:
        state = getattr(self, "_mig_manager_state", None)
        if state is None:
            state = self._mig_manager_state = {"seen": None, "nodes": {}}
        return state

    def set_mig_manager(self, seconds: tuple[float, float] | list[float] | None = None,
                        reboot: bool | None = None) -> dict[str, Any]:
        """Set how long a new layout takes (apply, reboot) and whether a MIG mode change reboots (also
        ``POST /_emulator/set_mig_manager``); returns the settings."""
        if seconds is not None:
            apply, reboot_seconds = (float(v) for v in seconds)
            if apply < 0 or reboot_seconds < 0:
                raise ApiError(400, "set_mig_manager: seconds must be >= 0", "BadRequest")
            self.mig_manager_seconds = (apply, reboot_seconds)
        if reboot is not None:
            self.mig_manager_reboot = bool(reboot)
        return {"seconds": list(self.mig_manager_seconds), "reboot": self.mig_manager_reboot}

    def mig_manager_step(self) -> list[str]:
        """Move every node's MIG reconfiguration on as the manager would now; returns what happened."""
        state = self._mig_state()
        rv = self._kind_rv.get(NODES, 0)  # type: ignore[attr-defined]
        if state["seen"] == rv and not state["nodes"]:
            return []
        state["seen"] = rv
        done: list[str] = []
        now = self.clock.now()  # type: ignore[attr-defined]
        for node in self._mig_nodes():
            md = node["metadata"]
            labels = md.get("labels") or {}
            wanted = labels.get(nvidia.MIG_CONFIG_LABEL)
            name = md["name"]
            hardware = nvidia.parse_hardware((md.get("annotations") or {}).get(nvidia.HARDWARE_ANNOTATION, ""))
            if wanted is None or hardware is None:
                state["nodes"].pop(name, None)
                continue
            applied = (md.get("annotations") or {}).get(APPLIED_ANNOTATION) or nvidia.DISABLED
            current = labels.get(nvidia.MIG_CONFIG_STATE_LABEL)
            progress = state["nodes"].get(name)
            restarted = False
            if progress is not None and progress["config"] != wanted:
                del state["nodes"][name]  # the label moved again: start over
                progress, restarted = None, True
            if progress is None:
                if wanted == applied:
                    if restarted:  # back to what the GPUs have: the device plugin publishes it again
                        self._mig_apply(name, wanted, hardware)
                        done.append(f"mig-manager: {name} {wanted} kept")
                    elif current != "success":
                        self._mig_label(name, "success")
                    continue
                if nvidia.layout(hardware[1], wanted) is None:
                    if current != "failed":
                        self._mig_label(name, "failed")
                        done.append(f"mig-manager: {name} has no layout {wanted}: failed")
                    continue
                strategy = labels.get(nvidia.MIG_STRATEGY_LABEL) or "mixed"
                if strategy == "single" and len(nvidia.layout(hardware[1], wanted) or {}) > 1:
                    if current != "failed":
                        self._mig_label(name, "failed")
                        done.append(f"mig-manager: {name}: {wanted} is not one profile (strategy single): failed")
                    continue
                state["nodes"][name] = {"config": wanted, "since": now, "phase": "pending"}
                self._mig_pending(node, wanted)
                done.append(f"mig-manager: {name} pending {wanted}")
                continue
            if progress["phase"] == "pending":
                if now - progress["since"] < self.mig_manager_seconds[0] or self._gpu_pods_on(name):
                    continue
                mode_change = applied == nvidia.DISABLED or wanted == nvidia.DISABLED
                if self.mig_manager_reboot and mode_change:
                    progress.update(phase="rebooting", since=now)
                    self._mig_label(name, "rebooting")
                    self.set_node_condition(name, "Ready", False, "KubeletNotReady",  # type: ignore[attr-defined]
                                            "node is rebooting to change the MIG mode")
                    done.append(f"mig-manager: {name} rebooting")
                    continue
            elif progress["phase"] == "rebooting":
                if now - progress["since"] < self.mig_manager_seconds[1]:
                    continue
                self.set_node_condition(name, "Ready", True)  # type: ignore[attr-defined]
            self._mig_apply(name, wanted, hardware)
            state["nodes"].pop(name, None)
            done.append(f"mig-manager: {name} {wanted} applied")
        state["seen"] = self._kind_rv.get(NODES, 0)  # type: ignore[attr-defined]
        return done

    def _mig_nodes(self) -> list[Obj]:
        """The nodes labelled ``nvidia.com/mig.config`` (found by the store's label index: no other node is
        parsed) and those the manager is working on."""
        state = self._mig_state()
        with self._lock:  # type: ignore[attr-defined]
            entries = self._stores[NODES].entries  # type: ignore[attr-defined]
            found = [data for key, (data, _rv, labels, _fields) in entries.items()
                     if key[1] in state["nodes"] or any(k == nvidia.MIG_CONFIG_LABEL for k, _ in labels)]
        return [orjson.loads(data) for data in found]

    # ------------------------------------------------------------------ the steps

    def _mig_label(self, name: str, value: str) -> None:
        try:
            self.set_node_labels(name, {nvidia.MIG_CONFIG_STATE_LABEL: value})  # type: ignore[attr-defined]
        except ApiError:
            pass

    def _gpu_pods_on(self, name: str) -> list[Obj]:
        """The active GPU pods bound to the node (found by the store's field index: no other pod is parsed)."""
        node_at = get_resource(PODS).field_index["spec.nodeName"]
        with self._lock:  # type: ignore[attr-defined]
            found = [data for data, _rv, _labels, fields in self._stores[PODS].entries.values()  # type: ignore[attr-defined]
                     if fields[node_at] == name]
        pods = [orjson.loads(data) for data in found]
        return [p for p in pods if kube_requests.pod_is_active(p) and uses_gpu(p)]

    def _mig_pending(self, node: Obj, wanted: str) -> None:
        name = node["metadata"]["name"]

        def change(obj: Obj) -> None:
            obj["metadata"].setdefault("labels", {})[nvidia.MIG_CONFIG_STATE_LABEL] = "pending"
            allocatable = obj.setdefault("status", {}).setdefault("allocatable", {})
            for resource in list(allocatable):
                if nvidia.is_exposure_resource(resource):
                    allocatable[resource] = "0"  # the device plugin is down

        try:
            self.update_node(name, change)  # type: ignore[attr-defined]
        except ApiError:
            return
        for pod in self._gpu_pods_on(name):
            md = pod["metadata"]
            try:
                self.delete_pod(md.get("namespace") or "default", md["name"])  # type: ignore[attr-defined]
            except ApiError:
                continue
            self._record_event(pod, "Warning", "Evicted",  # type: ignore[attr-defined]
                               f"Evicted: the NVIDIA MIG manager applies the MIG layout {wanted} on node {name}",
                               component=COMPONENT, kind="Pod", api_version="v1")

    def _mig_apply(self, name: str, wanted: str, hardware: tuple[int, str, int, str]) -> None:
        gpus, product, memory, family = hardware

        def change(obj: Obj) -> None:
            md = obj["metadata"]
            labels = md.setdefault("labels", {})
            strategy = labels.get(nvidia.MIG_STRATEGY_LABEL) or "mixed"
            new_labels, resources = nvidia.exposure(gpus=gpus, product=product, memory_mib=memory, family=family,
                                                    mig_config=wanted, mig_strategy=strategy)
            for key in [k for k in labels if nvidia.is_exposure_label(k)]:
                del labels[key]
            labels.update(new_labels)
            labels[nvidia.MIG_CONFIG_STATE_LABEL] = "success"
            md.setdefault("annotations", {})[APPLIED_ANNOTATION] = wanted
            status = obj.setdefault("status", {})
            for field in ("capacity", "allocatable"):
                values = status.setdefault(field, {})
                for resource in [r for r in values if nvidia.is_exposure_resource(r)]:
                    del values[resource]
                values.update(resources)

        try:
            self.update_node(name, change)  # type: ignore[attr-defined]
        except (ApiError, ValueError):
            self._mig_label(name, "failed")
