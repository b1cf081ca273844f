"""Moving a node between pools through the Kubernetes API emulator: nothing of the node's own labels is
lost, the page warns and previews before anything changes, and a concurrent change is reported."""
import json
import re

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from nodepools import kube, services
from nodepools.models import Node
from tests.pages import login, page_text

V100 = "Tesla-V100-SXM2-16GB"


class EmuOrg:
    """The `org` of conftest served by a KubeEmulator (plus v100-20, labelled gpu-type=v100), its
    mirror refreshed from the emulator by `mirror()` as the sync's watch would."""

    def __init__(self, org, emu, tmp_path):
        from nodepools.demo_cluster import operand_pods
        from kubesim import make_node

        self.org, self.emu = org, emu
        node = make_node("v100-20", gpus=4, gpu_product=V100, gpu_memory_mib=16384,
                         labels={"gpu-type": "v100", "team": "vision"})
        org.nodes.append(node)
        org.pods.extend(operand_pods([node]))
        emu.load(nodes=org.nodes, pods=org.pods)
        services.cluster_update(actor=None, cluster=org.cluster, kube_context="emulator",
                                kubeconfig_path=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
        self.original = dict(emu.get_node("v100-20")["metadata"]["labels"])
        self.mirror()

    def mirror(self):
        services.cluster_objects_replace(cluster=self.org.cluster,
                                         nodes=[self.emu.get_node(n["metadata"]["name"]) for n in self.org.nodes],
                                         pods=self.org.pods)

    def run(self, name, node, gpus):
        from kubesim import make_pod

        pod = make_pod(name, "runai-rnd-a", node=node, priority=50,
                       containers=[{"name": "main", "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}])
        self.org.pods.append(pod)
        self.emu.add_pod(pod)
        self.mirror()

    def labels(self, name="v100-20"):
        return self.emu.get_node(name)["metadata"]["labels"]

    def annotation(self, name="v100-20"):
        return (self.emu.get_node(name)["metadata"].get("annotations") or {}).get(kube.PREVIOUS_LABELS_ANNOTATION)

    def node(self, name="v100-20"):
        return Node.objects.get(cluster=self.org.cluster, name=name)


@pytest.fixture
def lab(org, tmp_path, emulators):
    return EmuOrg(org, emulators(bookmark_interval=1.0), tmp_path)  # KubeEmulator's own, which it always had


def preview(client, lab, pool, name="v100-20"):
    response = client.post(reverse("node-move", args=[lab.node(name).pk]), {"pool": pool.pk})
    assert response.status_code == 200
    return response


def resource_version_of(response) -> str:
    return re.search(r'name="resource_version" value="([^"]*)"', response.content.decode()).group(1)


def confirm(client, lab, pool, response, name="v100-20"):
    return client.post(reverse("node-move", args=[lab.node(name).pk]), {
        "pool": pool.pk, "confirm": "1", "resource_version": resource_version_of(response)}, follow=True)


# --- Labels are never lost -------------------------------------------------------------------------

def test_v100_20_into_a_pool_of_another_gpu_type_and_back_to_default_gets_its_labels_back_exactly(client, lab, users):
    org = lab.org
    login(client, users, "sysadmin")
    response = confirm(client, lab, org.a100, preview(client, lab, org.a100))
    assert "Node 'v100-20' is being moved to pool 'a100'" in page_text(response)
    assert lab.labels()["gpu-type"] == "A100"
    assert json.loads(lab.annotation()) == {"gpu-type": "v100"}
    lab.mirror()  # what the sync's watch does
    assert lab.node().pool == org.a100

    response = confirm(client, lab, org.default, preview(client, lab, org.default))
    assert "Node 'v100-20' is being moved to pool 'default'" in page_text(response)
    assert lab.labels() == lab.original
    assert lab.annotation() is None
    lab.mirror()
    assert lab.node().pool == org.default


def test_leaving_for_a_pool_of_another_key_restores_the_old_key_and_default_removes_the_new_one(lab, users):
    org, admin = lab.org, users["sysadmin"]
    fast = services.pool_create(actor=None, cluster=org.cluster, name="fast", label_key="speed", label_value="fast")
    services.node_move_to_pool(actor=admin, node=lab.node(), pool=org.a100)
    lab.mirror()
    services.node_move_to_pool(actor=admin, node=lab.node(), pool=fast)
    assert lab.labels() == {**lab.original, "speed": "fast"}  # gpu-type is v100 again
    assert json.loads(lab.annotation()) == {"speed": None}  # the node never had `speed`
    lab.mirror()
    assert lab.node().pool == fast
    services.node_move_to_pool(actor=admin, node=lab.node(), pool=org.default)
    assert lab.labels() == lab.original and lab.annotation() is None


def test_a_node_whose_own_label_selects_a_pool_keeps_it_for_when_it_returns(lab, users):
    org, admin = lab.org, users["sysadmin"]
    services.node_move_to_pool(actor=admin, node=lab.node("a100-1"), pool=org.default)
    assert "gpu-type" not in lab.labels("a100-1")
    assert json.loads(lab.annotation("a100-1")) == {"gpu-type": "A100"}
    lab.mirror()
    assert lab.node("a100-1").pool == org.default
    services.node_move_to_pool(actor=admin, node=lab.node("a100-1"), pool=org.a100)
    assert lab.labels("a100-1")["gpu-type"] == "A100" and lab.annotation("a100-1") is None


def test_one_patch_request_per_move_of_labels_and_annotation_together(lab, users):
    before = lab.emu.stats()["requests"].get("patch nodes", 0)
    services.node_move_to_pool(actor=users["sysadmin"], node=lab.node(), pool=lab.org.a100)
    assert lab.emu.stats()["requests"].get("patch nodes", 0) - before == 1
    assert lab.labels()["gpu-type"] == "A100" and lab.annotation() is not None


# --- The move page warns and previews; nothing changes without confirmation ------------------------

def test_the_move_page_warns_that_a_label_value_is_overwritten_naming_key_old_and_new_value(client, lab, users):
    login(client, users, "sysadmin")
    page = page_text(preview(client, lab, lab.org.a100))
    assert "Move node v100-20 to pool a100?" in page
    assert ("The move overwrites label gpu-type: v100 → A100. The old value is kept in the node's annotation "
            "console.gpu-capacity.io/previous-labels and restored when the node leaves the pool.") in page
    # Nothing changed yet.
    assert lab.labels() == lab.original
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.MOVE).exists()


def test_the_move_page_warns_when_the_gpu_type_differs_from_the_pools_other_nodes(client, lab, users):
    login(client, users, "sysadmin")
    page = page_text(preview(client, lab, lab.org.a100))
    assert (f"This node's GPU type is {V100}, but the other nodes of pool a100 have NVIDIA-A100-SXM4-40GB") in page


def test_no_gpu_type_warning_when_the_node_joins_nodes_of_its_own_type(client, lab, users):
    from nodepools.demo_cluster import operand_pods
    from kubesim import make_node

    node = make_node("a100-3", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960)
    lab.org.nodes.append(node)
    lab.org.pods.extend(operand_pods([node]))
    lab.emu.add_node(node)
    lab.mirror()
    login(client, users, "sysadmin")
    response = preview(client, lab, lab.org.a100, name="a100-3")
    assert 'id="gpu-type-warning"' not in response.content.decode()
    assert "default a100 1: a100-3 4 (4 ready)" in page_text(response)


def test_the_move_preview_lists_node_gpus_workloads_and_pools_left_short_of_their_deserved_quota(client, lab, users):
    from projects import services as org_services

    org = lab.org
    org_services.quota_update(actor=None, quota=org.quota(org.rnd, org.default), expected_version=None,
                              gpu_deserved=10)
    lab.run("train-1", "v100-20", gpus=2)
    login(client, users, "sysadmin")
    response = preview(client, lab, org.a100)
    page = page_text(response)
    # From, to, nodes, GPUs (ready), allocated GPUs, running workloads.
    assert "default a100 1: v100-20 4 (4 ready) 2 1" in page
    # Pool, nodes before → after, ready GPUs before → after, departments' deserved GPUs.
    assert "default 3 → 2 12 → 8 10 over-subscribed by 2 GPUs" in page
    assert "a100 2 → 3 8 → 12 0" in page
    assert ("Pool default: its departments' deserved quota (10 GPUs) then exceeds its 8 ready GPUs "
            "(today 12 ready GPUs cover it).") in page
    assert lab.labels() == lab.original


def test_a_confirmation_for_a_node_changed_since_the_preview_is_refused_with_409_and_overwrites_nothing(
        client, lab, users):
    org = lab.org
    login(client, users, "sysadmin")
    first = preview(client, lab, org.a100)
    # Someone changes the Node meanwhile (kubectl label ...).
    lab.emu.update_node("v100-20", {"metadata": {"labels": {"gpu-type": "v100-32gb"}}})
    response = confirm(client, lab, org.a100, first)
    page = page_text(response)
    assert ("Could not move node 'v100-20' to pool 'a100': the node was changed in the cluster after it was read "
            "(409 Conflict); nothing was changed. Review the move again.") in page
    assert lab.labels()["gpu-type"] == "v100-32gb" and lab.annotation() is None
    # The page shows the move again from the node's new state; confirming that one works.
    assert "overwrites label gpu-type: v100-32gb → A100" in page
    assert resource_version_of(response) != resource_version_of(first)
    confirm(client, lab, org.a100, response)
    assert lab.labels()["gpu-type"] == "A100" and json.loads(lab.annotation()) == {"gpu-type": "v100-32gb"}


def test_the_service_refuses_a_stale_resource_version(lab, users):
    stale = lab.emu.get_node("v100-20")["metadata"]["resourceVersion"]
    lab.emu.update_node("v100-20", {"metadata": {"labels": {"rack": "r7"}}})
    with pytest.raises(services.NodeChanged):
        services.node_move_to_pool(actor=users["sysadmin"], node=lab.node(), pool=lab.org.a100,
                                   resource_version=stale)
    assert lab.labels()["gpu-type"] == "v100"


def test_the_move_preview_names_the_platform_left_without_nodes_and_the_workload_landing_over_quota(
        client, lab, users):
    from workloads import services as workload_services

    org = lab.org
    workload_services.platform_create(actor=None, pool=org.default, name="vision", node_selector={"team": "vision"})
    lab.run("train-1", "v100-20", gpus=2)
    login(client, users, "sysadmin")
    page = page_text(preview(client, lab, org.a100))
    assert ("Platform vision of pool default is left with 0 nodes (it has 1 now): workloads submitted to it "
            "will wait.") in page
    assert ("Workload runai-rnd-a/train-1 of project rnd-a (2 GPUs) moves to pool a100, where its project has no "
            "quota (0 GPUs): project rnd-a is then over quota by 2 GPUs there (2 allocated).") in page
    assert lab.labels() == lab.original
