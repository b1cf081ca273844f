"""kube.client against the emulator over HTTP (the real official client speaking to kubesim): the one client
factory, and CustomObjects' one error contract — every failure an ApiRefusal naming status, reason and field;
None for a missing object; a 404 ApiRefusal for a kind the cluster does not serve; status 0 when nobody
answers. No Django needed: ``pytest tests/kube -p no:django``."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kube.client import FIELD_MANAGER, ApiRefusal, CustomKind, CustomObjects, api_client, api_error_message
from kubesim import KubeEmulator

FLAVORS = CustomKind("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor")
LOCAL_QUEUES = CustomKind("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
NODEPOOLS = CustomKind("karpenter.sh", "v1", "nodepools", "NodePool")
UNSERVED = CustomKind("example.com", "v1", "widgets", "Widget")


@pytest.fixture
def objects(sim: KubeEmulator, tmp_path: Path) -> Iterator[CustomObjects]:
    with api_client(kubeconfig=sim.write_kubeconfig(tmp_path / "kubeconfig"), context="emulator") as client:
        yield CustomObjects(client)


def flavor(name: str, **labels: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": name, "labels": labels}, "spec": {"nodeLabels": {"pool": name}}}


def test_create_get_list_replace_patch_delete_as_the_field_manager(objects: CustomObjects, sim: KubeEmulator) -> None:
    created = objects.create(FLAVORS, flavor("a100", owner="console"))
    objects.create(FLAVORS, flavor("h100", owner="console"))
    objects.create(FLAVORS, flavor("t4", owner="someone-else"))
    assert created["metadata"]["uid"] and objects.get(FLAVORS, "a100")["spec"] == {"nodeLabels": {"pool": "a100"}}
    managers = {m["manager"] for m in sim.get("resourceflavors.kueue.x-k8s.io", "a100")["metadata"]["managedFields"]}
    assert managers == {FIELD_MANAGER}
    # Listing pages through everything (one object a page here) and names each object's kind.
    listed = objects.list(FLAVORS, label_selector="owner=console", page_size=1)
    assert sorted(o["metadata"]["name"] for o in listed) == ["a100", "h100"]
    assert {(o["apiVersion"], o["kind"]) for o in listed} == {("kueue.x-k8s.io/v1beta2", "ResourceFlavor")}
    changed = dict(created, spec={"nodeLabels": {"pool": "a100-80gb"}})
    replaced = objects.replace(FLAVORS, changed)
    assert replaced["spec"]["nodeLabels"] == {"pool": "a100-80gb"}
    patched = objects.patch(FLAVORS, "a100", {"metadata": {"labels": {"owner": None, "tier": "gold"}}})
    assert patched["metadata"]["labels"] == {"tier": "gold"}
    objects.delete(FLAVORS, "a100", uid=patched["metadata"]["uid"])
    assert objects.get(FLAVORS, "a100") is None
    objects.delete(FLAVORS, "a100")  # already gone is what was wanted


def test_namespaced_objects(objects: CustomObjects) -> None:
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "team", "namespace": "runai-vision"}, "spec": {"clusterQueue": "vision"}}
    objects.create(LOCAL_QUEUES, queue)
    assert objects.get(LOCAL_QUEUES, "team", "runai-vision")["spec"]["clusterQueue"] == "vision"
    assert objects.get(LOCAL_QUEUES, "team", "default") is None
    assert [q["metadata"]["name"] for q in objects.list(LOCAL_QUEUES, namespace="runai-vision")] == ["team"]
    assert objects.list(LOCAL_QUEUES, namespace="default") == []
    objects.delete(LOCAL_QUEUES, "team", "runai-vision")
    assert objects.list(LOCAL_QUEUES) == []


def test_a_write_that_lost_a_race_is_a_409_refusal(objects: CustomObjects) -> None:
    read = objects.create(FLAVORS, flavor("a100"))
    objects.patch(FLAVORS, "a100", {"metadata": {"labels": {"touched": "yes"}}})
    with pytest.raises(ApiRefusal) as refused:
        objects.replace(FLAVORS, read)  # carries the resourceVersion it was read at
    assert refused.value.status == 409 and refused.value.reason == "Conflict"
    for stale in ({"resource_version": read["metadata"]["resourceVersion"]}, {"uid": "another-uid"}):
        with pytest.raises(ApiRefusal) as refused:
            objects.delete(FLAVORS, "a100", **stale)
        assert refused.value.status == 409 and refused.value.message.startswith("Precondition failed: ")
    assert objects.get(FLAVORS, "a100")["metadata"]["labels"] == {"touched": "yes"}
    with pytest.raises(ApiRefusal) as refused:
        objects.create(FLAVORS, flavor("a100"))
    assert refused.value.status == 409 and refused.value.reason == "AlreadyExists"


def test_an_invalid_object_is_a_422_refusal_naming_the_field(objects: CustomObjects) -> None:
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                            "name": "default"},
                                           "requirements": [{"key": "karpenter.sh/capacity-type",
                                                             "operator": "Sometimes", "values": ["spot"]}]}}}}
    with pytest.raises(ApiRefusal) as refused:
        objects.create(NODEPOOLS, pool)
    refusal = refused.value
    assert refusal.status == 422 and refusal.reason == "Invalid"
    assert refusal.field.startswith("spec.template.spec.requirements[0]") and "Sometimes" in refusal.message
    assert refusal.causes and refusal.causes[0]["field"] == refusal.field
    assert objects.get(NODEPOOLS, "gpu") is None


def test_a_kind_the_cluster_does_not_serve_lists_as_a_404_refusal(objects: CustomObjects) -> None:
    with pytest.raises(ApiRefusal) as refused:
        objects.list(UNSERVED)
    assert refused.value.status == 404
    assert objects.get(UNSERVED, "anything") is None


def test_no_answer_is_a_refusal_with_status_0(sim: KubeEmulator, tmp_path: Path) -> None:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    sim.stop()
    with api_client(kubeconfig=kubeconfig) as client:
        objects = CustomObjects(client, timeout=(1, 1))
        with pytest.raises(ApiRefusal) as refused:
            objects.list(FLAVORS)
    refusal = refused.value
    assert refusal.status == 0 and refusal.message.startswith("the cluster could not be reached: ")
    assert str(refusal) == refusal.message and "Connection refused" in refusal.message
    # The pages' words for it are the ones they had for the client's own exception.
    assert api_error_message(refusal) == api_error_message(refusal.__cause__) == refusal.message.split(": ", 1)[1]


def test_the_factory_needs_a_kubeconfig_or_the_in_cluster_account() -> None:
    with pytest.raises(ValueError, match="neither a kubeconfig path nor in-cluster access"):
        api_client(kubeconfig=None, context=None, in_cluster=False)
