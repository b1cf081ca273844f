"""The pool create/edit preview says every consequence: the platforms of the pools nodes leave that are left
without nodes, and the running workloads that land in a pool where their project's quota does not cover them."""
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from kubesim import make_node
from nodepools import services
from nodepools.models import NodePool
from projects import services as org_services
from projects.selectors import preview_over_quota
from tests.pages import login, page_text
from workloads import services as workload_services
from workloads.selectors import platforms_left_without_nodes

V100 = "Tesla-V100-SXM2-16GB"
JOB = {"batch.kubernetes.io/job-name": "train"}


def create_data(org, **extra):
    return {"cluster": org.cluster.pk, "name": "v100", "label_key": "nvidia.com/gpu.product", "label_value": V100,
            "gpu_placement": "binpack", "cpu_placement": "binpack", "description": "", "gpu_limit": "", **extra}


def edit_data(**extra):
    return {"name": "a100", "label_key": "gpu-type", "label_value": "A100", "description": "",
            "gpu_placement": "binpack", "cpu_placement": "binpack", "gpu_limit": "", **extra}


def test_a_new_pool_taking_a_platforms_last_nodes_says_the_platform_is_left_with_none(client, org, users):
    workload_services.platform_create(actor=None, pool=org.default, name="v100-train",
                                      node_selector={"nvidia.com/gpu.product": V100})
    # A platform of default with no node today is not one the change leaves without nodes.
    workload_services.platform_create(actor=None, pool=org.default, name="h100-none",
                                      node_selector={"nvidia.com/gpu.product": "NVIDIA-H100"})
    # A platform of a pool no node leaves is not concerned.
    workload_services.platform_create(actor=None, pool=org.a100, name="a100-train")
    login(client, users, "sysadmin")
    page = page_text(client.post(reverse("pool-create"), create_data(org)))
    assert ("Platform v100-train of pool default is left with 0 nodes (it has 2 now): "
            "workloads submitted to it will wait.") in page
    assert "h100-none" not in page and "a100-train" not in page
    assert not NodePool.objects.filter(name="v100").exists()


def test_a_platform_keeping_one_of_its_nodes_is_not_said_to_be_left_without(client, org, users):
    org.nodes.append(make_node("v100-3", gpus=4, gpu_product=V100, labels={"speed": "slow"}))
    org.load()
    workload_services.platform_create(actor=None, pool=org.default, name="v100-train",
                                      node_selector={"nvidia.com/gpu.product": V100})
    workload_services.platform_create(actor=None, pool=org.default, name="slow", node_selector={"speed": "slow"})
    login(client, users, "sysadmin")
    page = page_text(client.post(reverse("pool-create"), create_data(org, name="slow", label_key="speed",
                                                                     label_value="slow")))
    assert "Platform slow of pool default is left with 0 nodes (it has 1 now)" in page
    assert "v100-train" not in page  # v100-1 and v100-2 stay


def test_editing_a_pools_label_names_the_platforms_of_every_pool_the_nodes_leave(client, org, users):
    workload_services.platform_create(actor=None, pool=org.a100, name="a100-train")
    workload_services.platform_create(actor=None, pool=org.default, name="v100-train",
                                      node_selector={"nvidia.com/gpu.product": V100})
    login(client, users, "sysadmin")
    # a100 takes the V100 nodes; its A100 nodes go to default: each pool's platform loses its nodes.
    page = page_text(client.post(reverse("pool-edit", args=[org.a100.pk]),
                                 edit_data(label_key="nvidia.com/gpu.product", label_value=V100)))
    assert "Platform a100-train of pool a100 is left with 0 nodes" not in page  # it takes any node: the V100s
    assert "Platform v100-train of pool default is left with 0 nodes (it has 2 now)" in page


def test_a_workload_moved_into_a_pool_where_its_project_has_no_quota_is_named_with_how_much_it_is_over(
        client, org, users):
    org.run("train-1", org.rnd_a, "v100-1", gpus=2, labels=JOB)
    org.run("small", org.rnd_b, "v100-2", gpus=1)
    login(client, users, "sysadmin")
    page = page_text(client.post(reverse("pool-create"), create_data(org)))
    assert ("Workload train of project rnd-a (2 GPUs) moves to pool v100, where its project has no quota "
            "(0 GPUs): project rnd-a is then over quota by 2 GPUs there (2 allocated).") in page
    assert ("Workload runai-rnd-b/small of project rnd-b (1 GPU) moves to pool v100, where its project has no "
            "quota (0 GPUs): project rnd-b is then over quota by 1 GPU there (1 allocated).") in page


def test_a_workload_moved_into_a_pool_where_its_projects_quota_is_too_little_counts_what_runs_there(
        client, org, users):
    org_services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=4)
    org_services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None,
                              gpu_deserved=2)
    org_services.quota_update(actor=None, quota=org.quota(org.rnd, org.default), expected_version=None,
                              gpu_deserved=4)
    org_services.quota_update(actor=None, quota=org.quota(org.rnd_b, org.default), expected_version=None,
                              gpu_deserved=4)
    org.run("train-1", org.rnd_a, "v100-1", gpus=2, labels=JOB)
    org.run("covered", org.rnd_b, "a100-1", gpus=3)
    login(client, users, "sysadmin")
    # a100 would hold v100-1 and v100-2 only (label gpu.product=V100): train arrives (2 GPUs) where rnd-a
    # deserves 2 and runs nothing after the A100 nodes go: covered. Add 1 GPU of rnd-a running on a v100 node.
    org.run("extra", org.rnd_a, "v100-2", gpus=1)
    page = page_text(client.post(reverse("pool-edit", args=[org.a100.pk]),
                                 edit_data(label_key="nvidia.com/gpu.product", label_value=V100)))
    assert ("moves to pool a100, where its project's quota is 2 GPUs: project rnd-a is then over quota by 1 GPU "
            "there (3 allocated).") in page
    assert "Workload train of project rnd-a (2 GPUs)" in page
    assert "Workload runai-rnd-a/extra of project rnd-a (1 GPU)" in page
    # rnd-b's 3 GPUs go to default, where it deserves 4: not over quota.
    assert "covered" not in page


def test_the_preview_consequences_read_a_fixed_number_of_queries(org, users):
    workload_services.platform_create(actor=None, pool=org.default, name="v100-train",
                                      node_selector={"nvidia.com/gpu.product": V100})
    counts = []
    for n in (2, 12):
        for i in range(len(org.nodes), len(org.nodes) + n):
            org.nodes.append(make_node(f"v100-x{i}", gpus=4, gpu_product=V100))
        org.load()
        for i in range(n):
            org.run(f"job-{n}-{i}", org.rnd_a, f"v100-x{len(org.nodes) - 1 - i}", gpus=1)
        preview = services.pool_create_preview(actor=users["sysadmin"], cluster=org.cluster, name="v100",
                                               label_key="nvidia.com/gpu.product", label_value=V100)
        with CaptureQueriesContext(connection) as queries:
            left = platforms_left_without_nodes(user=users["sysadmin"], preview=preview)
            over = preview_over_quota(user=users["sysadmin"], preview=preview)
        counts.append(len(queries))
        assert [p.platform.name for p in left] == ["v100-train"]
        assert len(over) == (2 if n == 2 else 14)
    assert counts[0] == counts[1]
