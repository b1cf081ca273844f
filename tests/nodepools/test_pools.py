"""Clusters and node pools: the default pool, label validation, membership, capacity, who may write."""
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from nodepools import services
from nodepools.models import Node, NodePool, NodeStatus
from projects.models import Quota


def test_every_cluster_gets_an_undeletable_default_pool(cluster):
    default = cluster.default_pool
    assert default.name == "default" and default.is_default and default.label == ""
    with pytest.raises(ValidationError, match="default pool cannot be deleted"):
        services.pool_delete(actor=None, pool=default)
    assert NodePool.objects.filter(pk=default.pk).exists()


def test_default_pool_cannot_be_relabelled_or_renamed(cluster):
    with pytest.raises(ValidationError) as exc:
        services.pool_update(actor=None, pool=cluster.default_pool, label_key="gpu-type", label_value="A100")
    assert "label_key" in exc.value.message_dict


@pytest.mark.parametrize(
    "key, value, field, message",
    [
        ("GPU Type", "A100", "label_key", "starting and ending with a letter or digit, at most 63 characters, "
                                          "optionally after a prefix of lowercase letters, digits, '-' and '.' (at "
                                          "most 253 characters) and '/', e.g. example.com/gpu-type (“GPU Type” holds "
                                          "a space)."),
        ("gpu-type", "x" * 64, "label_value", "at most 63 characters; or empty (it has 64 characters)."),
        ("Bad_Prefix.io/gpu", "A100", "label_key", "(the prefix “Bad_Prefix.io” holds capital letters and '_')."),
        ("gpu-type", "A100 80GB", "label_value", "Use letters, digits, '-', '_' and '.'; start and end with a letter "
                                                 "or digit; at most 63 characters; or empty (“A100 80GB” holds a space)."),
        ("", "A100", "label_key", "needs a label key"),
    ],
)
def test_pool_label_must_be_kubernetes_label_syntax(cluster, key, value, field, message):
    with pytest.raises(ValidationError) as exc:
        services.pool_create(actor=None, cluster=cluster, name="a100", label_key=key, label_value=value)
    assert message in " ".join(exc.value.message_dict[field])
    assert not NodePool.objects.filter(name="a100").exists()


@pytest.mark.parametrize("name", ["A100", "a100_80gb", "x" * 64, "default"])
def test_pool_name_must_be_a_dns_label_and_not_default(cluster, name):
    with pytest.raises(ValidationError) as exc:
        services.pool_create(actor=None, cluster=cluster, name=name, label_key="gpu-type", label_value="A100")
    assert "name" in exc.value.message_dict


def test_valid_pool_with_prefixed_key_is_created(cluster):
    pool = services.pool_create(actor=None, cluster=cluster, name="h100-prod", label_key="karpenter.sh/nodepool",
                                label_value="h100-prod", gpu_placement="spread", gpu_limit=64)
    assert (pool.label, pool.gpu_placement, pool.cpu_placement, pool.gpu_limit) == (
        "karpenter.sh/nodepool=h100-prod", "spread", "binpack", 64)


def test_two_pools_cannot_select_the_same_label(org):
    with pytest.raises(ValidationError, match="Pool 'a100' already selects nodes by gpu-type=A100"):
        services.pool_create(actor=None, cluster=org.cluster, name="other", label_key="gpu-type", label_value="A100")


def test_nodes_belong_to_the_pool_whose_label_they_carry_else_default(org):
    members = dict(Node.objects.values_list("name", "pool__name"))
    assert members == {"v100-1": "default", "v100-2": "default", "a100-1": "a100", "a100-2": "a100"}


def test_node_matching_two_pools_is_a_conflict_counted_in_the_first_created(org):
    services.pool_create(actor=None, cluster=org.cluster, name="fast", label_key="fast", label_value="yes")
    org.nodes[2]["metadata"]["labels"]["fast"] = "yes"
    org.load()
    node = Node.objects.get(name="a100-1")
    assert node.pool == org.a100
    assert node.pool_conflicts == ["a100", "fast"]
    assert Node.objects.get(name="a100-2").pool_conflicts == []


def test_deleting_a_pool_returns_its_nodes_to_default_and_drops_its_quota_rows(org):
    services.pool_delete(actor=None, pool=org.a100)
    assert set(Node.objects.values_list("pool__name", flat=True)) == {"default"}
    assert not Quota.objects.filter(pool__name="a100").exists()


def test_relabelling_a_pool_moves_nodes(org):
    services.pool_update(actor=None, pool=org.a100, label_value="V100")
    assert Node.objects.filter(pool=org.a100).count() == 0
    services.pool_update(actor=None, pool=org.a100, label_value="A100")
    assert Node.objects.filter(pool=org.a100).count() == 2


def test_pool_capacity_and_allocation_are_summed_by_the_database(org):
    org.run("train-1", org.rnd_a, "a100-1", gpus=2, cpu="4", memory="8Gi")
    org.run("infer-1", org.ops_a, "a100-2", gpus=1, cpu="500m", memory="1Gi", priority=125)
    org.run("done", org.ops_a, "a100-2", gpus=1, phase="Succeeded")
    pools = {p.name: p for p in NodePool.objects.with_capacity()}
    a100 = pools["a100"]
    assert (a100.node_count, a100.gpu_total, a100.gpu_ready) == (2, 8, 8)
    assert a100.gpu_allocated == Decimal(3)
    # Plus the two NVIDIA operand pods (100m, 128Mi each) on each of the two nodes.
    assert a100.cpu_allocated_millis == 4500 + 400
    assert a100.memory_allocated_bytes == 9 * 2**30 + 4 * 128 * 2**20
    assert a100.gpu_memory_total_mib == 8 * 40960
    assert a100.workload_count == 2
    assert a100.gpu_free == 5
    assert a100.status == "Ready"
    assert (pools["default"].gpu_allocated, pools["default"].gpu_total) == (0, 8)


def test_pool_status_empty_ready_unschedulable(org):
    pool = services.pool_create(actor=None, cluster=org.cluster, name="h100", label_key="gpu-type", label_value="H100")
    assert NodePool.objects.with_capacity().get(pk=pool.pk).status == "Empty"
    assert NodePool.objects.with_capacity().get(pk=org.a100.pk).status == "Ready"
    for node in org.nodes[2:]:
        node["spec"]["unschedulable"] = True
    org.load()
    assert NodePool.objects.with_capacity().get(pk=org.a100.pk).status == "Unschedulable"


def test_cordoned_node_is_not_ready_with_scheduling_disabled(org):
    org.nodes[0]["spec"]["unschedulable"] = True
    org.load()
    node = Node.objects.get(name="v100-1")
    assert node.status == NodeStatus.NOT_READY
    assert node.status_text == "Not ready (Scheduling disabled)"


def test_malformed_objects_are_skipped_and_the_rest_is_loaded(org, caplog):
    org.nodes.append({"metadata": {"name": "broken"}, "status": {"allocatable": {"cpu": "12x"}}})
    org.pods.append({"metadata": {"name": "no-namespace"}, "spec": {}})
    result = services.cluster_objects_replace(cluster=org.cluster, nodes=org.nodes, pods=org.pods)
    assert result == {"nodes": 4, "pods": len(org.pods) - 1, "skipped": 2}
    assert "broken" in caplog.text and "no-namespace" in caplog.text
    assert Node.objects.count() == 4


@pytest.mark.parametrize("role_user", ["rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody"])
def test_only_system_administrators_write_clusters_and_pools(org, users, role_user):
    actor = users[role_user]
    with pytest.raises(PermissionDenied):
        services.cluster_create(actor=actor, name="other")
    with pytest.raises(PermissionDenied):
        services.cluster_update(actor=actor, cluster=org.cluster, description="x")
    with pytest.raises(PermissionDenied):
        services.pool_create(actor=actor, cluster=org.cluster, name="h100", label_key="gpu-type", label_value="H100")
    with pytest.raises(PermissionDenied):
        services.pool_update(actor=actor, pool=org.a100, description="x")
    with pytest.raises(PermissionDenied):
        services.pool_delete(actor=actor, pool=org.a100)
    with pytest.raises(PermissionDenied):
        services.cluster_delete(actor=actor, cluster=org.cluster)
    assert NodePool.objects.count() == 2


def test_system_administrator_writes_clusters_and_pools(org, users):
    admin = users["sysadmin"]
    other = services.cluster_create(actor=admin, name="other")
    pool = services.pool_create(actor=admin, cluster=other, name="h100", label_key="gpu-type", label_value="H100")
    services.pool_update(actor=admin, pool=pool, description="H100 nodes")
    services.pool_delete(actor=admin, pool=pool)
    services.cluster_delete(actor=admin, cluster=other)
    assert list(NodePool.objects.values_list("name", flat=True)) == ["default", "a100"]
