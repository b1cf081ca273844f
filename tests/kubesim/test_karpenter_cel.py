"""The CEL rules (x-kubernetes-validations) of Karpenter's karpenter.sh/v1 NodePool CRD, enforced by the emulator
as the API server does: each broken rule is a 422 Invalid naming the field, with the CRD's message; what the
rules allow is stored. Through the official Python client over HTTP (and kubectl for one)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator

import orjson
import pytest
from kubernetes import client, config

from kubesim import KubeEmulator

NODEPOOLS = ("karpenter.sh", "v1", "nodepools")
REQS = "spec.template.spec.requirements"
LABELS = "spec.template.metadata.labels"
REF = "spec.template.spec.nodeClassRef"


@pytest.fixture
def crd(sim_kubeconfig: str) -> Iterator[client.CustomObjectsApi]:
    api = config.new_client_from_config(config_file=sim_kubeconfig, context="emulator")
    try:
        yield client.CustomObjectsApi(api)
    finally:
        api.close()


def nodepool(name: str = "gpu", *, requirements=None, labels=None, **spec) -> dict:
    template: dict = {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": requirements if requirements is not None else [
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]}]}}
    if labels is not None:
        template["metadata"] = {"labels": labels}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": template, **spec}}


def with_ref(**ref) -> dict:
    pool = nodepool()
    pool["spec"]["template"]["spec"]["nodeClassRef"].update(ref)
    return pool


def refused(crd: client.CustomObjectsApi, call: Callable[[], object]) -> dict:
    with pytest.raises(client.ApiException) as exc:
        call()
    assert exc.value.status == 422
    body = orjson.loads(exc.value.body)
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    assert body["details"]["kind"] == "NodePool" and body["details"]["group"] == "karpenter.sh"
    return body


def req(key: str, operator: str, *values: str, **extra) -> dict:
    out: dict = {"key": key, "operator": operator, **extra}
    if values:
        out["values"] = list(values)
    return out


# A rule that cannot be evaluated refuses the object too; the API server then puts the CEL error before the
# rule's message (apiextensions-apiserver schema/cel/validation.go: "<error> evaluating rule: <message>"),
# e.g. `x.values` of a requirement without values, or int() of a value that is no integer.
NO_VALUES = "no such key: values evaluating rule: "
NOT_AN_INT = "type conversion error from 'string' to 'int' evaluating rule: "

# (object, field named, message: the CRD's x-kubernetes-validations message, the type the API server shows)
REFUSED = {
    "budget schedule without duration": (
        nodepool(disruption={"budgets": [{"nodes": "0", "schedule": "0 9 * * mon-fri"}]}),
        "spec.disruption.budgets", "array", "'schedule' must be set with 'duration'"),
    "budget duration without schedule": (
        nodepool(disruption={"budgets": [{"nodes": "10%"}, {"nodes": "0", "duration": "8h"}]}),
        "spec.disruption.budgets", "array", "'schedule' must be set with 'duration'"),
    "template label in the karpenter.sh domain": (
        nodepool(labels={"karpenter.sh/team": "ml"}), LABELS, "object", 'label domain "karpenter.sh" is restricted'),
    "template label in a karpenter.sh subdomain": (
        nodepool(labels={"custom.karpenter.sh/team": "ml"}), LABELS, "object",
        'label domain "karpenter.sh" is restricted'),
    "template label karpenter.sh/nodepool": (
        nodepool(labels={"karpenter.sh/nodepool": "other"}), LABELS, "object",
        'label "karpenter.sh/nodepool" is restricted'),
    "template label kubernetes.io/hostname": (
        nodepool(labels={"kubernetes.io/hostname": "node-1"}), LABELS, "object",
        'label "kubernetes.io/hostname" is restricted'),
    "requirement key in the karpenter.sh domain": (
        nodepool(requirements=[req("karpenter.sh/team", "In", "ml")]), f"{REQS}[0].key", "string",
        'label domain "karpenter.sh" is restricted'),
    "requirement key karpenter.sh/nodepool": (
        nodepool(requirements=[req("karpenter.sh/capacity-type", "In", "spot"),
                               req("karpenter.sh/nodepool", "In", "other")]), f"{REQS}[1].key", "string",
        'label "karpenter.sh/nodepool" is restricted'),
    "requirement key kubernetes.io/hostname": (
        nodepool(requirements=[req("kubernetes.io/hostname", "In", "node-1")]), f"{REQS}[0].key", "string",
        'label "kubernetes.io/hostname" is restricted'),
    "In without values": (
        nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In")]), REQS, "array",
        NO_VALUES + "requirements with operator 'In' must have a value defined"),
    "In with an empty list of values": (
        nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", values=[])]), REQS, "array",
        "requirements with operator 'In' must have a value defined"),
    "Gt with two values": (
        nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-count", "Gt", "1", "2")]), REQS, "array",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    "Lt with no value": (
        nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-count", "Lt")]), REQS, "array",
        NO_VALUES + "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    "Gte with a negative value": (
        nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-count", "Gte", "-1")]), REQS, "array",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    "Lte with a value that is no integer": (
        nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-count", "Lte", "eight")]), REQS, "array",
        NOT_AN_INT + "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    "minValues above the number of values": (
        nodepool(requirements=[req("node.kubernetes.io/instance-type", "In", "p5.48xlarge", "p4d.24xlarge",
                                   minValues=3)]), REQS, "array",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field"),
    "empty nodeClassRef group": (with_ref(group=""), f"{REF}.group", "string", "group may not be empty"),
    "empty nodeClassRef kind": (with_ref(kind=""), f"{REF}.kind", "string", "kind may not be empty"),
    "empty nodeClassRef name": (with_ref(name=""), f"{REF}.name", "string", "name may not be empty"),
    "a static NodePool limiting more than nodes": (
        nodepool(replicas=2, limits={"nodes": "4", "nvidia.com/gpu": "16"}), "spec", "object",
        "only 'limits.nodes' is supported on static NodePools"),
    "a static NodePool with a weight": (
        nodepool(replicas=2, weight=10), "spec", "object", "'weight' is not supported on static NodePools"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_each_cel_rule_refuses_what_the_api_server_refuses(crd: client.CustomObjectsApi, sim: KubeEmulator,
                                                           case: str) -> None:
    obj, field, shown, message = REFUSED[case]
    body = refused(crd, lambda: crd.create_cluster_custom_object(*NODEPOOLS, copy.deepcopy(obj)))
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": field,
                                          "message": f'Invalid value: "{shown}": {message}'}]
    assert body["message"] == f'NodePool.karpenter.sh "gpu" is invalid: {field}: Invalid value: "{shown}": {message}'
    assert sim.list("nodepools.karpenter.sh") == []  # nothing stored


ACCEPTED = {
    "the well-known karpenter.sh keys and other domains": nodepool(requirements=[
        req("karpenter.sh/capacity-type", "In", "spot", "on-demand"), req("kubernetes.io/arch", "In", "amd64"),
        req("node.kubernetes.io/instance-type", "NotIn", "p3.2xlarge"), req("topology.kubernetes.io/zone", "Exists"),
        req("example.com/karpenter.sh", "DoesNotExist")], labels={"karpenter.sh/capacity-type": "spot",
                                                                  "team": "ml", "example.com/owner": "ml"}),
    "integer bounds": nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-count", "Gt", "0"),
                                             req("karpenter.k8s.aws/instance-gpu-count", "Lt", "9"),
                                             req("karpenter.k8s.aws/instance-cpu", "Gte", "8"),
                                             req("karpenter.k8s.aws/instance-memory", "Lte", "1048576")]),
    "minValues met": nodepool(requirements=[req("node.kubernetes.io/instance-type", "In", "p5.48xlarge",
                                                "p4d.24xlarge", minValues=2)]),
    "budgets with schedule and duration": nodepool(disruption={
        "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30m",
        "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]}),
    "a static NodePool limiting nodes": nodepool(replicas=2, limits={"nodes": "4"}),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_what_the_rules_allow_is_stored(crd: client.CustomObjectsApi, sim: KubeEmulator, case: str) -> None:
    created = crd.create_cluster_custom_object(*NODEPOOLS, copy.deepcopy(ACCEPTED[case]))
    assert created["metadata"]["resourceVersion"]
    stored, sent = sim.get("nodepools.karpenter.sh", "gpu")["spec"], ACCEPTED[case]["spec"]
    assert stored["template"]["spec"]["requirements"] == sent["template"]["spec"]["requirements"]
    assert stored["template"].get("metadata") == sent["template"].get("metadata")
    for field in ("disruption", "replicas", "limits"):
        if field in sent:
            assert stored[field] == sent[field]


@pytest.mark.parametrize("change, field, message", [
    ({"group": "karpenter.azure.com"}, REF, "nodeClassRef.group is immutable"),
    ({"kind": "AKSNodeClass"}, REF, "nodeClassRef.kind is immutable"),
])
def test_the_node_class_kind_and_group_cannot_change(crd: client.CustomObjectsApi, sim: KubeEmulator, change: dict,
                                                     field: str, message: str) -> None:
    crd.create_cluster_custom_object(*NODEPOOLS, nodepool())
    patch = {"spec": {"template": {"spec": {"nodeClassRef": change}}}}
    body = refused(crd, lambda: crd.patch_cluster_custom_object(*NODEPOOLS, "gpu", patch))
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": field,
                                          "message": f'Invalid value: "object": {message}'}]
    assert sim.get("nodepools.karpenter.sh", "gpu")["spec"]["template"]["spec"]["nodeClassRef"]["kind"] == "EC2NodeClass"
    # Another node class of the same kind and group is fine.
    crd.patch_cluster_custom_object(*NODEPOOLS, "gpu", {"spec": {"template": {"spec": {"nodeClassRef": {
        "name": "gpu-class"}}}}})
    assert sim.get("nodepools.karpenter.sh", "gpu")["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "gpu-class"


def test_a_nodepool_cannot_turn_static_or_dynamic(crd: client.CustomObjectsApi, sim: KubeEmulator) -> None:
    message = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
    crd.create_cluster_custom_object(*NODEPOOLS, nodepool())
    body = refused(crd, lambda: crd.patch_cluster_custom_object(*NODEPOOLS, "gpu", {"spec": {"replicas": 2}}))
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec",
                                          "message": f'Invalid value: "object": {message}'}]
    crd.create_cluster_custom_object(*NODEPOOLS, nodepool("static", replicas=2))
    current = crd.get_cluster_custom_object(*NODEPOOLS, "static")
    del current["spec"]["replicas"]
    body = refused(crd, lambda: crd.replace_cluster_custom_object(*NODEPOOLS, "static", current))
    assert body["details"]["causes"][0]["message"] == f'Invalid value: "object": {message}'
    # A static NodePool may change its replicas.
    crd.patch_cluster_custom_object(*NODEPOOLS, "static", {"spec": {"replicas": 3}})
    assert sim.get("nodepools.karpenter.sh", "static")["spec"]["replicas"] == 3


def test_kubectl_shows_the_crds_message(kubectl: Callable[..., object]) -> None:
    obj = nodepool(requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In")])
    proc = kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
    assert proc.returncode != 0
    assert "spec.template.spec.requirements: Invalid value: \"array\": " + NO_VALUES + "requirements with operator " \
           "'In' must have a value defined" in proc.stderr


# ------------------------------------------------------------------------------------------------ NodeClaims

NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")


def nodeclaim(name: str = "gpu-abcde", *, requirements=None) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name}, "spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": requirements if requirements is not None else [
            req("karpenter.sh/nodepool", "In", "gpu"), req("node.kubernetes.io/instance-type", "In", "p5.48xlarge")]}}


@pytest.mark.parametrize("requirements, field, shown, message", [
    ([req("karpenter.sh/team", "In", "ml")], "spec.requirements[0].key", "string",
     'label domain "karpenter.sh" is restricted'),
    ([req("kubernetes.io/hostname", "In", "node-1")], "spec.requirements[0].key", "string",
     'label "kubernetes.io/hostname" is restricted'),
    ([req("karpenter.k8s.aws/instance-gpu-name", "In")], "spec.requirements", "array",
     NO_VALUES + "requirements with operator 'In' must have a value defined"),
    ([req("karpenter.k8s.aws/instance-gpu-count", "Gt", "1", "2")], "spec.requirements", "array",
     "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    ([req("node.kubernetes.io/instance-type", "In", "p5.48xlarge", minValues=2)], "spec.requirements", "array",
     "requirements with 'minValues' must have at least that many values specified in the 'values' field"),
])
def test_nodeclaim_requirements_follow_the_same_rules(crd: client.CustomObjectsApi, sim: KubeEmulator,
                                                      requirements: list, field: str, shown: str, message: str) -> None:
    with pytest.raises(client.ApiException) as exc:
        crd.create_cluster_custom_object(*NODECLAIMS, nodeclaim(requirements=requirements))
    assert exc.value.status == 422
    assert orjson.loads(exc.value.body)["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": field, "message": f'Invalid value: "{shown}": {message}'}]
    assert sim.list("nodeclaims.karpenter.sh") == []


def test_a_nodeclaims_spec_is_immutable_its_status_and_labels_are_not(crd: client.CustomObjectsApi,
                                                                      sim: KubeEmulator) -> None:
    crd.create_cluster_custom_object(*NODECLAIMS, nodeclaim())
    with pytest.raises(client.ApiException) as exc:
        crd.patch_cluster_custom_object(*NODECLAIMS, "gpu-abcde", {"spec": {"expireAfter": "24h"}})
    assert exc.value.status == 422
    assert orjson.loads(exc.value.body)["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec", "message": 'Invalid value: "object": spec is immutable'}]
    crd.patch_cluster_custom_object(*NODECLAIMS, "gpu-abcde", {"metadata": {"labels": {"team": "ml"}}})
    crd.patch_cluster_custom_object_status(*NODECLAIMS, "gpu-abcde", {"status": {"providerID": "aws:///i-0abc"}})
    stored = sim.get("nodeclaims.karpenter.sh", "gpu-abcde")
    assert stored["metadata"]["labels"] == {"team": "ml"} and stored["status"]["providerID"] == "aws:///i-0abc"
