"""Karpenter NodePools and NodeClaims in the emulator, mirrored by the real sync over HTTP."""
from __future__ import annotations

import copy

import pytest

from provisioning.examples import example_spec, nodepool_object
from tests.nodepools.test_sync import FAST, Lab  # noqa: F401  (the sync's test harness)

NODEPOOLS, NODECLAIMS = "nodepools.karpenter.sh", "nodeclaims.karpenter.sh"


@pytest.fixture
def lab(db, sim, tmp_path):
    lab = Lab(sim, tmp_path)
    yield lab
    lab.stop()


def condition(kind, status="True", reason="", message=""):
    return {"type": kind, "status": status, "reason": reason or (kind if status == "True" else "Not" + kind),
            "message": message, "lastTransitionTime": "2026-11-23T10:00:00Z"}


def add_nodepool(emu, name, example="a100-standard", *, status=None, **spec_changes):
    spec = example_spec(example)
    spec.update(copy.deepcopy(spec_changes))
    obj = emu.create(NODEPOOLS, nodepool_object(name, spec))
    if status is not None:
        obj = emu.update(NODEPOOLS, name, lambda o: {**o, "status": status}, subresource="status")
    return obj


def nodepool_status(*, gpus="0", cpu="0", nodes=0, ready="True"):
    return {"resources": {"cpu": cpu, "memory": "0", "nvidia.com/gpu": gpus, "nodes": str(nodes)}, "nodes": nodes,
            "conditions": [condition("ValidationSucceeded"), condition("NodeClassReady"), condition("Ready", ready)]}


def add_nodeclaim(emu, name, nodepool, *, conditions=(), instance_type="p4d.24xlarge", capacity_type="on-demand",
                  zone="us-east-1a", gpus="8", node_name="", provider_id=""):
    obj = {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": nodepool,
                                               "node.kubernetes.io/instance-type": instance_type,
                                               "karpenter.sh/capacity-type": capacity_type,
                                               "topology.kubernetes.io/zone": zone}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": [nodepool]}],
                 "resources": {"requests": {"nvidia.com/gpu": gpus}}},
    }
    emu.create(NODECLAIMS, obj)
    status = {"conditions": [condition(c) if isinstance(c, str) else c for c in conditions]}
    if node_name:
        status["nodeName"] = node_name
    if provider_id:
        status["providerID"] = provider_id
    if conditions or node_name:
        emu.update(NODECLAIMS, name, lambda o: {**o, "status": status}, subresource="status")
    return emu.get(NODECLAIMS, name)
