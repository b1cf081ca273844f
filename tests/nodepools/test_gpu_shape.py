"""A pool's GPU shape, against the Kubernetes API emulator over HTTP: the MIG layout (and the device plugin's
configuration) is checked, previewed with the GPU pods NVIDIA's MIG manager evicts, written to the pool's nodes
as labels on confirmation (audited), and the nodes' progress (pending, success, failed; asked vs published) is
shown on the pool, node list and node pages as the sync brings it back."""
from __future__ import annotations

import json
import re
import urllib.request

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from audit.models import AuditEvent
from kube import gpu as kube_gpu
from nodepools import services
from nodepools.models import Node, NodePool
from tests.pages import login, page_text

MIG_CONFIG = kube_gpu.LABEL_MIG_CONFIG
MIG_STATE = kube_gpu.LABEL_MIG_CONFIG_STATE
DEVICE_PLUGIN_CONFIG = kube_gpu.LABEL_DEVICE_PLUGIN_CONFIG


def control(sim, op: str, **body):
    request = urllib.request.Request(f"{sim.url}/_emulator/{op}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")["result"]


def listed(sim, path: str) -> list[dict]:
    with urllib.request.urlopen(f"{sim.url}{path}", timeout=10) as response:
        return json.loads(response.read())["items"]


class Lab:
    """The `org` of conftest served by the emulator (the MIG manager applies a layout at its next tick), its
    mirror refreshed from the emulator's lists over HTTP by `mirror()`, as the sync would."""

    def __init__(self, org, sim, tmp_path):
        self.org, self.sim = org, sim
        sim.load(nodes=org.nodes, pods=org.pods)
        services.cluster_update(actor=None, cluster=org.cluster, kube_context="emulator",
                                kubeconfig_path=str(sim.write_kubeconfig(tmp_path / "kubeconfig")))
        assert control(sim, "set_mig_manager", seconds=[0, 0]) == {"seconds": [0.0, 0.0], "reboot": False}
        self.mirror()

    def mirror(self):
        services.cluster_objects_replace(cluster=self.org.cluster, nodes=listed(self.sim, "/api/v1/nodes"),
                                         pods=listed(self.sim, "/api/v1/pods"))

    def run(self, name, project, node, gpus=1):
        from kubesim import make_pod

        requests = {"cpu": "1"}
        if gpus:
            requests[kube_gpu.GPU_RESOURCE] = str(gpus)
        self.sim.add_pod(make_pod(name, f"runai-{project.name}", node=node, priority=50,
                                  containers=[{"name": "main", "requests": requests}]))
        self.mirror()

    def labels(self, name):
        return self.sim.get_node(name)["metadata"].get("labels") or {}

    def tick(self):
        control(self.sim, "tick")
        self.mirror()


@pytest.fixture
def lab(org, sim, tmp_path):
    return Lab(org, sim, tmp_path)


def response_choices(client, pool):
    return [v for v, _ in client.get(shape_url(pool)).context["form"].fields["mig_config"].choices]


def shape_url(pool):
    return reverse("pool-gpu-shape", args=[pool.pk])


def preview(client, pool, **data):
    response = client.post(shape_url(pool), {"mig_config": "", "mig_config_custom": "", "device_plugin_config": "",
                                             **data})
    assert response.status_code == 200
    return response


def previewed_key(response) -> str:
    return response.context["preview"].key


def confirm(client, pool, response, **data):
    return client.post(shape_url(pool), {"mig_config": "", "mig_config_custom": "", "device_plugin_config": "",
                                         **data, "confirm": "1", "previewed": previewed_key(response)}, follow=True)


# --- Validation ------------------------------------------------------------------------------------

def test_the_page_offers_the_layouts_of_the_pools_gpus_and_custom(client, lab, users):
    login(client, users, "sysadmin")
    response = client.get(shape_url(lab.org.a100))
    choices = [value for value, _ in response.context["form"].fields["mig_config"].choices]
    # A100 40GB: the MIG manager's default layouts, in their order.
    assert choices == ["", "all-disabled", "all-balanced", "all-1g.5gb", "all-1g.10gb", "all-2g.10gb", "all-3g.20gb",
                       "all-4g.20gb", "all-7g.40gb", "custom"]


@pytest.mark.parametrize("data, message", [
    ({"mig_config": "custom", "mig_config_custom": "all-1x.10gb"},
     "MIG layout: 'all-1x.10gb' is neither all-disabled, all-balanced nor all-<profile> with a MIG profile"),
    ({"mig_config": "custom", "mig_config_custom": "my layout"},
     "MIG layout: must consist of alphanumeric characters, '-', '_' or '.'"),
    ({"mig_config": "custom", "mig_config_custom": "x" * 64}, "MIG layout: must be no more than 63 characters"),
    ({"mig_config": "custom", "mig_config_custom": ""},
     "Custom MIG layout: Name the custom MIG layout (or choose one of the list)."),
    ({"mig_config": "all-9g.99gb"}, "MIG layout: Select a valid choice."),
    ({"device_plugin_config": "time sliced!"}, "Device plugin configuration: Use letters, digits, '-', '_' and '.'; start and end with a letter or digit; at most 63 characters; or empty (“time sliced!” holds a space and '!')."),
])
def test_a_bad_shape_names_the_field_and_the_rule_and_changes_nothing(client, lab, users, data, message):
    login(client, users, "sysadmin")
    response = preview(client, lab.org.a100, **data)
    assert message in page_text(response)
    assert response.context["preview"] is None
    assert MIG_CONFIG not in lab.labels("a100-1") and DEVICE_PLUGIN_CONFIG not in lab.labels("a100-1")
    assert NodePool.objects.get(pk=lab.org.a100.pk).mig_config == ""


def test_the_service_refuses_a_bad_layout_naming_the_field(lab, users):
    with pytest.raises(ValidationError) as caught:
        services.pool_gpu_shape_apply(actor=users["sysadmin"], pool=lab.org.a100, mig_config="all-")
    assert "mig_config" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        services.pool_gpu_shape_apply(actor=users["sysadmin"], pool=lab.org.a100, mig_config="",
                                      device_plugin_config="-x")
    assert "device_plugin_config" in caught.value.message_dict
    assert MIG_CONFIG not in lab.labels("a100-1")


def test_only_a_system_administrator_sets_a_gpu_shape(client, lab, users):
    login(client, users, "rnd_admin")
    assert client.get(shape_url(lab.org.a100)).status_code == 403
    assert client.post(shape_url(lab.org.a100), {"mig_config": "all-1g.10gb", "confirm": "1"}).status_code == 403
    with pytest.raises(PermissionDenied):
        services.pool_gpu_shape_apply(actor=users["rnd_admin"], pool=lab.org.a100, mig_config="all-1g.10gb")
    assert MIG_CONFIG not in lab.labels("a100-1")


# --- The preview names what is evicted -------------------------------------------------------------

def test_the_preview_names_the_gpu_pods_evicted_with_their_project_and_gpus_and_writes_nothing(client, lab, users):
    org = lab.org
    lab.run("train-a", org.rnd_a, "a100-1", gpus=2)
    lab.run("notebook-b", org.ops_a, "a100-2", gpus=1)
    lab.run("cpu-only", org.rnd_a, "a100-2", gpus=0)
    lab.run("elsewhere", org.rnd_a, "v100-1", gpus=4)  # another pool: untouched
    login(client, users, "sysadmin")
    response = preview(client, org.a100, mig_config="all-1g.10gb")
    text = page_text(response)
    assert "evicts 2 GPU pods holding 3 GPUs" in text
    rows = {p.name: (p.project, p.node, p.gpus) for p in response.context["preview"].evicted}
    assert rows == {"train-a": ("rnd-a", "a100-1", 2), "notebook-b": ("ops-a", "a100-2", 1)}
    assert "runai-rnd-a/train-a rnd-a a100-1 2" in text
    assert "Confirm and set the GPU shape" in text
    # Nothing was written, neither to the cluster nor to the pool.
    assert MIG_CONFIG not in lab.labels("a100-1")
    assert NodePool.objects.get(pk=org.a100.pk).mig_config == ""
    assert not AuditEvent.objects.filter(object_type="nodepool", action=AuditEvent.Action.UPDATE).exists()


def test_nodes_already_in_the_layout_evict_nothing_and_gpus_that_cannot_be_cut_are_left(client, lab, users):
    org = lab.org
    lab.run("train-v", org.rnd_a, "v100-1", gpus=1)
    login(client, users, "sysadmin")
    # V100s: not MIG-capable, so no layout is offered; one named is still not written to them.
    assert response_choices(client, org.default) == ["", "custom"]
    response = preview(client, org.default, mig_config="custom", mig_config_custom="all-1g.10gb")
    text = page_text(response)
    assert "v100-1 is left as it is: its GPUs (Tesla-V100-SXM2-16GB) are not MIG-capable" in text
    assert "No GPU pod is evicted" in text
    assert response.context["preview"].written == []


def test_a_layout_the_gpus_do_not_have_warns_that_the_nodes_will_fail(client, lab, users):
    login(client, users, "sysadmin")
    text = page_text(preview(client, lab.org.a100, mig_config="custom", mig_config_custom="all-3g.40gb"))  # an 80GB layout on 40GB GPUs
    assert ("The MIG manager's default configuration has no layout all-3g.40gb for NVIDIA-A100-SXM4-40GB" in text)
    text = page_text(preview(client, lab.org.a100, mig_config="custom", mig_config_custom="team-layout"))
    assert "team-layout is a custom layout: the MIG manager's configuration must define it" in text


# --- The write -------------------------------------------------------------------------------------

def test_confirming_labels_every_node_of_the_pool_in_the_cluster_and_audits_it(client, lab, users):
    org = lab.org
    lab.run("train-a", org.rnd_a, "a100-1", gpus=2)
    login(client, users, "sysadmin")
    before = lab.sim.stats()["requests"].get("patch nodes", 0)
    response = confirm(client, org.a100, preview(client, org.a100, mig_config="all-1g.10gb",
                                                 device_plugin_config="time-sliced-4"),
                       mig_config="all-1g.10gb", device_plugin_config="time-sliced-4")
    assert "GPU shape of pool 'a100' set on 2 nodes" in page_text(response)
    assert response.redirect_chain[-1][0] == reverse("pool-detail", args=[org.a100.pk])
    for name in ("a100-1", "a100-2"):
        assert lab.labels(name)[MIG_CONFIG] == "all-1g.10gb"
        assert lab.labels(name)[DEVICE_PLUGIN_CONFIG] == "time-sliced-4"
    assert MIG_CONFIG not in lab.labels("v100-1")
    assert lab.sim.stats()["requests"].get("patch nodes", 0) - before == 2  # one patch per node
    pool = NodePool.objects.get(pk=org.a100.pk)
    assert (pool.mig_config, pool.device_plugin_config) == ("all-1g.10gb", "time-sliced-4")
    # Only the sync writes what comes from the cluster: the mirror has no label yet.
    assert MIG_CONFIG not in Node.objects.get(name="a100-1").labels
    event = AuditEvent.objects.filter(object_type="nodepool", action=AuditEvent.Action.UPDATE).latest("when")
    assert event.actor_name == "sysadmin"
    assert event.after["mig_config"] == "all-1g.10gb"
    assert event.after["node_labels"] == {n: {MIG_CONFIG: "all-1g.10gb", DEVICE_PLUGIN_CONFIG: "time-sliced-4"}
                                          for n in ("a100-1", "a100-2")}
    assert event.after["evicted_pods"] == ["runai-rnd-a/train-a"]
    assert event.before["node_labels"]["a100-1"] == {MIG_CONFIG: "", DEVICE_PLUGIN_CONFIG: ""}


def test_a_gpu_pod_started_since_the_preview_asks_for_the_preview_again(client, lab, users):
    org = lab.org
    login(client, users, "sysadmin")
    shown = preview(client, org.a100, mig_config="all-1g.10gb")
    assert "No GPU pod is evicted" in page_text(shown)
    lab.run("late", org.rnd_b, "a100-2", gpus=1)
    response = confirm(client, org.a100, shown, mig_config="all-1g.10gb")
    text = page_text(response)
    assert "What this change does has changed since it was shown" in text
    assert "runai-rnd-b/late rnd-b a100-2 1" in text  # the preview again, with the new pod
    assert MIG_CONFIG not in lab.labels("a100-2")
    response = confirm(client, org.a100, response, mig_config="all-1g.10gb")
    assert lab.labels("a100-2")[MIG_CONFIG] == "all-1g.10gb"


# --- The state shown -------------------------------------------------------------------------------

def test_the_pages_follow_the_mig_manager_from_pending_to_the_new_slices(client, lab, users):
    org = lab.org
    lab.run("train-a", org.rnd_a, "a100-1", gpus=2)
    admin = login(client, users, "sysadmin")
    services.pool_gpu_shape_apply(actor=admin, pool=org.a100, mig_config="all-1g.10gb")
    lab.tick()  # the MIG manager: pending, the GPU pods drained
    assert lab.labels("a100-1")[MIG_STATE] == "pending"
    pool_page = page_text(client.get(reverse("pool-detail", args=[org.a100.pk])))
    assert "MIG layout of the nodes" in pool_page
    assert "a100-1 all-1g.10gb pending no MIG slices published" not in pool_page  # whole GPUs still
    assert "a100-1 all-1g.10gb pending 4 whole GPUs (until it reports all-1g.10gb)" in pool_page
    node_list = page_text(client.get(reverse("node-list")))
    assert "MIG layouts being applied" in node_list
    assert "a100-1: all-1g.10gb pending; slices published now: 4 whole GPUs" in node_list
    node_page = page_text(client.get(reverse("node-detail", args=[Node.objects.get(name="a100-1").pk])))
    assert "MIG layout asked all-1g.10gb: pending; slices published now: 4 whole GPUs" in node_page

    lab.tick()  # no GPU pod left: the new geometry
    assert lab.labels("a100-1")[MIG_STATE] == "success"
    pool_page = page_text(client.get(reverse("pool-detail", args=[org.a100.pk])))
    assert "a100-1 all-1g.10gb success 16 × 1g.10gb" in pool_page
    assert "a100-2 all-1g.10gb success 16 × 1g.10gb" in pool_page
    assert "until it reports" not in pool_page
    assert "MIG layout all-1g.10gb" in pool_page  # the pool's shape and its sharing
    assert "MIG layouts being applied" not in page_text(client.get(reverse("node-list")))


def test_a_layout_the_mig_manager_cannot_apply_is_shown_as_a_problem(client, lab, users):
    org = lab.org
    admin = login(client, users, "sysadmin")
    services.pool_gpu_shape_apply(actor=admin, pool=org.a100, mig_config="team-layout")
    lab.tick()
    assert lab.labels("a100-1")[MIG_STATE] == "failed"
    response = client.get(reverse("pool-detail", args=[org.a100.pk]))
    html = response.content.decode()
    assert 'data-node="a100-1" data-mig-state="failed" class="problem"' in html
    assert "a100-1 team-layout failed — team-layout not applied 4 whole GPUs" in page_text(response)
    node_list = client.get(reverse("node-list")).content.decode()
    assert '<li data-node="a100-1" class="error">' in node_list
    node_page = page_text(client.get(reverse("node-detail", args=[Node.objects.get(name="a100-1").pk])))
    assert "MIG layout asked team-layout: failed — team-layout not applied" in node_page


def test_nodes_whose_layout_differs_from_the_pools_say_so(client, lab, users):
    org = lab.org
    admin = login(client, users, "sysadmin")
    services.pool_gpu_shape_apply(actor=admin, pool=org.a100, mig_config="all-1g.10gb")
    lab.tick(), lab.tick()
    lab.sim.set_node_labels("a100-2", {MIG_CONFIG: "all-balanced"})  # changed by hand in the cluster
    lab.mirror()
    pool_page = page_text(client.get(reverse("pool-detail", args=[org.a100.pk])))
    assert "a100-2 all-balanced (the pool asks all-1g.10gb)" in pool_page
    # Setting the shape again changes that node only.
    response = preview(client, org.a100, mig_config="all-1g.10gb")
    assert [n.node.name for n in response.context["preview"].written] == ["a100-2"]


def test_a_node_the_cluster_refuses_is_named_and_the_others_are_labelled(client, lab, users):
    org = lab.org
    login(client, users, "sysadmin")
    shown = preview(client, org.a100, mig_config="all-1g.10gb")
    control(lab.sim, "fail_next", n=1, status=500, path_prefix="/api/v1/nodes/a100-2")
    text = page_text(confirm(client, org.a100, shown, mig_config="all-1g.10gb"))
    assert "Could not label node 'a100-2': " in text
    assert "GPU shape of pool 'a100' set on 1 node:" in text
    assert lab.labels("a100-1")[MIG_CONFIG] == "all-1g.10gb"
    assert MIG_CONFIG not in lab.labels("a100-2")
    event = AuditEvent.objects.filter(object_type="nodepool", action=AuditEvent.Action.UPDATE).latest("when")
    assert list(event.after["node_labels"]) == ["a100-1"]
    assert list(event.after["failed_nodes"]) == ["a100-2"]
    # Once the sync brought the labels back, setting it again labels the node left.
    lab.mirror()
    response = preview(client, org.a100, mig_config="all-1g.10gb")
    assert [n.node.name for n in response.context["preview"].written] == ["a100-2"]


def test_the_nodes_table_has_a_mig_layout_column_and_the_csv_its_two_parts(client, lab, users):
    from tests.pages import csv_of

    org = lab.org
    admin = login(client, users, "sysadmin")
    services.pool_gpu_shape_apply(actor=admin, pool=org.a100, mig_config="all-1g.10gb")
    lab.tick()
    client.post(reverse("table-columns", args=["nodes"]), {"columns": ["name", "mig_layout"]})
    response = client.get(reverse("node-list"), {"sort": "name"})
    html = response.content.decode()
    assert '<code>all-1g.10gb</code> <span class="status status-pending mig-state">pending</span>' in html
    text = page_text(response)
    assert "Node MIG layout a100-1 all-1g.10gb pending a100-2 all-1g.10gb pending v100-1 — v100-2 —" in text
    rows = csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))
    assert rows == [["Node", "MIG layout asked", "MIG layout state"], ["a100-1", "all-1g.10gb", "pending"],
                    ["a100-2", "all-1g.10gb", "pending"], ["v100-1", "", ""], ["v100-2", "", ""]]


def test_clearing_the_shape_leaves_the_nodes_labels_as_they_are(client, lab, users):
    org = lab.org
    admin = login(client, users, "sysadmin")
    services.pool_gpu_shape_apply(actor=admin, pool=org.a100, mig_config="all-1g.10gb")
    lab.mirror()
    response = confirm(client, org.a100, preview(client, org.a100))
    assert "GPU shape of pool 'a100' cleared: the console leaves its nodes' labels as they are." in page_text(response)
    assert NodePool.objects.get(pk=org.a100.pk).mig_config == ""
    assert lab.labels("a100-1")[MIG_CONFIG] == "all-1g.10gb"


def test_a_node_rebooting_to_change_its_mig_mode_is_shown_in_progress(client, lab, users):
    org = lab.org
    assert control(lab.sim, "set_mig_manager", seconds=[0, 0], reboot=True)["reboot"] is True
    admin = login(client, users, "sysadmin")
    services.pool_gpu_shape_apply(actor=admin, pool=org.a100, mig_config="all-1g.10gb")
    lab.tick()  # pending
    lab.tick()  # MIG mode on: the node reboots
    assert lab.labels("a100-1")[MIG_STATE] == "rebooting"
    response = client.get(reverse("pool-detail", args=[org.a100.pk]))
    assert "a100-1 all-1g.10gb rebooting 4 whole GPUs (until it reports all-1g.10gb)" in page_text(response)
    assert 'data-node="a100-1" data-mig-state="rebooting">' in response.content.decode()  # not a problem
    lab.tick()
    assert "a100-1 all-1g.10gb success 16 × 1g.10gb" in page_text(
        client.get(reverse("pool-detail", args=[org.a100.pk])))


def test_the_pools_api_reads_its_gpu_shape_and_does_not_set_it(lab, users, api):
    org = lab.org
    services.pool_gpu_shape_apply(actor=users["sysadmin"], pool=org.a100, mig_config="all-1g.10gb",
                                  device_plugin_config="time-sliced-4")
    client = api(users["sysadmin"])
    body = client.get(f"/api/v1/node-pools/{org.a100.pk}/").json()
    assert (body["mig_config"], body["device_plugin_config"]) == ("all-1g.10gb", "time-sliced-4")
    response = client.patch(f"/api/v1/node-pools/{org.a100.pk}/", {"mig_config": "all-7g.40gb"}, format="json")
    assert NodePool.objects.get(pk=org.a100.pk).mig_config == "all-1g.10gb"
    assert lab.labels("a100-1")[MIG_CONFIG] == "all-1g.10gb"
    # Read-only there (POST …/gpu-shape/ sets it, after its dry run): the answer keeps the shape as it was.
    assert response.status_code == 200 and response.json()["mig_config"] == "all-1g.10gb"


def test_the_system_itself_sets_a_pools_gpu_shape_too(lab):
    done = services.pool_gpu_shape_apply(actor=None, pool=lab.org.a100, mig_config="all-balanced")
    assert sorted(done.labelled) == ["a100-1", "a100-2"]
    assert lab.labels("a100-2")[MIG_CONFIG] == "all-balanced"
    event = AuditEvent.objects.filter(object_type="nodepool", action=AuditEvent.Action.UPDATE).latest("when")
    assert event.actor_name == "" and event.after["mig_config"] == "all-balanced"


def test_a_device_plugin_configuration_with_time_slicing_shares_the_pools_gpus(client, lab, users):
    org = lab.org
    lab.sim.add_namespace("gpu-operator")
    lab.sim.upsert("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "time-slicing-config", "namespace": "gpu-operator"},
                                  "data": {"time-sliced-4": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                                            "    - name: nvidia.com/gpu\n      replicas: 4\n"}})
    lab.run("train-a", org.rnd_a, "a100-1", gpus=2)
    login(client, users, "sysadmin")
    shown = preview(client, org.a100, device_plugin_config="time-sliced-4")
    assert "No GPU pod is evicted" in page_text(shown)  # the device plugin restarts; pods keep running
    confirm(client, org.a100, shown, device_plugin_config="time-sliced-4")
    assert lab.labels("a100-1")[DEVICE_PLUGIN_CONFIG] == "time-sliced-4"
    assert MIG_CONFIG not in lab.labels("a100-1")
    lab.tick()  # the device plugin publishes 4 replicas per GPU
    pool_page = page_text(client.get(reverse("pool-detail", args=[org.a100.pk])))
    assert "GPU sharing time-slicing: 8 GPUs on 2 nodes; 4 replicas per GPU" in pool_page
    assert "GPU shape device plugin configuration time-sliced-4" in pool_page
    # Still 8 GPU-equivalents: 32 replicas of a quarter each.
    assert sum(n.gpu_allocatable for n in Node.objects.filter(pool=org.a100)) == 8


@pytest.mark.django_db
def test_a_large_pools_page_shows_its_nodes_by_mig_state_and_lists_only_those_not_done(org, users, client):
    """Past MIG_NODES_LISTED nodes asked a layout, the pool page shows the nodes by state (failed first, then
    those applying, then the most nodes) and lists one by one only the nodes not done, not 60 rows."""
    from kubesim import make_node
    from nodepools.selectors import MIG_NODES_LISTED

    pool = services.pool_create(actor=None, cluster=org.cluster, name="a100-mig", label_key="gpu-type",
                                label_value="A100-MIG")
    states = {"mig-000": "failed", "mig-001": "pending", "mig-002": "rebooting", "mig-003": "pending"}
    names = [f"mig-{i:03d}" for i in range(MIG_NODES_LISTED + 10)]
    org.nodes += [make_node(name, gpus=1, gpu_product="NVIDIA-A100-SXM4-80GB", mig_config="all-1g.10gb",
                            labels={"gpu-type": "A100-MIG", MIG_STATE: states.get(name, "success")})
                  for name in names]
    org.load()
    login(client, users, "sysadmin")
    response = client.get(reverse("pool-detail", args=[pool.pk]))
    text = page_text(response)
    html = response.content.decode()
    assert f"{len(names)} nodes were asked a MIG layout; by state:" in text
    groups = re.findall(r'<tr data-mig-state="([a-z]*)"[^>]*>.*?<td class="num">(\d+)</td></tr>', html)
    assert groups == [("failed", "1"), ("pending", "2"), ("rebooting", "1"), ("success", str(len(names) - 4))]
    assert "all-1g.10gb success 7 × 1g.10gb 56" in text
    listed = re.findall(r'<tr data-node="([^"]+)" data-mig-state', html)
    assert listed == ["mig-000", "mig-001", "mig-002", "mig-003"]  # the nodes not done, by name
    assert f'href="{reverse("node-list")}?pool={pool.pk}"' in html


# --- The same over the API -------------------------------------------------------------------------

def shape_api(client, pool, **body):
    return client.post(f"/api/v1/node-pools/{pool.pk}/gpu-shape/", body, format="json")


def test_the_api_dry_run_names_the_pods_evicted_and_writes_nothing(lab, users, api):
    org = lab.org
    lab.run("train-a", org.rnd_a, "a100-1", gpus=2)
    response = shape_api(api(users["sysadmin"]), org.a100, mig_config="all-1g.10gb")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["pool"] == org.a100.pk and body["mig_config"] == "all-1g.10gb" and body["key"]
    assert [(p["namespace"], p["name"], p["node"], p["project"], p["gpus"]) for p in body["evicted"]] == [
        ("runai-rnd-a", "train-a", "a100-1", "rnd-a", "2.000")]
    nodes = {n["node"]: n for n in body["nodes"]}
    assert nodes["a100-2"]["changes"] == {MIG_CONFIG: {"now": "", "asked": "all-1g.10gb"}}
    assert MIG_CONFIG not in lab.labels("a100-1")
    assert NodePool.objects.get(pk=org.a100.pk).mig_config == ""


def test_the_api_writes_the_shape_it_previewed_and_refuses_a_stale_preview(lab, users, api):
    org = lab.org
    client = api(users["sysadmin"])
    key = shape_api(client, org.a100, mig_config="all-1g.10gb").json()["key"]
    lab.run("late", org.rnd_b, "a100-2", gpus=1)  # a GPU pod started since the dry run
    stale = shape_api(client, org.a100, mig_config="all-1g.10gb", confirm=True, previewed=key)
    assert stale.status_code == 400
    assert "has changed since it was shown" in stale.json()["errors"]["mig_config"][0]
    assert MIG_CONFIG not in lab.labels("a100-2")
    key = shape_api(client, org.a100, mig_config="all-1g.10gb").json()["key"]
    done = shape_api(client, org.a100, mig_config="all-1g.10gb", confirm=True, previewed=key)
    assert done.status_code == 202, done.content
    assert sorted(done.json()["labelled"]) == ["a100-1", "a100-2"] and done.json()["failed"] == {}
    assert [p["name"] for p in done.json()["preview"]["evicted"]] == ["late"]
    assert lab.labels("a100-2")[MIG_CONFIG] == "all-1g.10gb"
    assert NodePool.objects.get(pk=org.a100.pk).mig_config == "all-1g.10gb"
    # The MIG manager applies it; the pool's API then reads the new slices.
    lab.tick()
    lab.tick()
    shapes = client.get(f"/api/v1/node-pools/{org.a100.pk}/").json()["gpu_shapes"]
    assert {row["profile"] for row in shapes["slices"]} == {"1g.10gb"}


def test_the_api_refuses_a_bad_layout_naming_the_field_and_anyone_but_a_system_administrator(lab, users, api):
    org = lab.org
    bad = shape_api(api(users["sysadmin"]), org.a100, mig_config="all 1g")
    assert bad.status_code == 400 and "mig_config" in bad.json()["errors"]
    assert shape_api(api(users["rnd_admin"]), org.a100, mig_config="all-1g.10gb").status_code == 403
    assert shape_api(api(users["nobody"]), org.a100, mig_config="all-1g.10gb").status_code == 404
    assert shape_api(api(None), org.a100, mig_config="all-1g.10gb").status_code in (401, 403)
    assert MIG_CONFIG not in lab.labels("a100-1")


def test_a_cluster_the_console_cannot_reach_writes_nothing_and_says_why(org, users, api):
    """The org's cluster has no kubeconfig: the write is refused naming the field, the pool keeps its shape."""
    node = Node.objects.get(name="a100-1")
    node.labels = {**node.labels, kube_gpu.LABEL_MIG_CAPABLE: "true"}
    node.save(update_fields=["labels"])
    response = shape_api(api(users["sysadmin"]), org.a100, mig_config="all-1g.10gb", confirm=True)
    assert response.status_code == 400, response.content
    assert "cannot write to cluster 'lab'" in response.json()["errors"]["mig_config"][0]
    assert NodePool.objects.get(pk=org.a100.pk).mig_config == ""
