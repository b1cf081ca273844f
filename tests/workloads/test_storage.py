"""K8_STORAGE is held against nodes: the mirror carries each node's allocatable ephemeral storage and
the pods' ephemeral-storage requests, so a node's free storage is its allocatable minus the requests of
the pods active there. A rule one node satisfies passes; a rule no node satisfies is refused with, per
node, why. The per-node view (`osmo resource list`) shows storage used / capacity."""
from __future__ import annotations

import pytest
from django.urls import reverse

from kubesim import make_pod
from tests.pages import table_rows
from workloads import engine, selectors
from workloads import services as config

pytestmark = pytest.mark.django_db

GIB = 2**30


def give_storage(org, allocatable, pods):
    """Set the nodes' allocatable ephemeral storage and run pods asking for storage (name, node, amount)."""
    for node in org.nodes:
        if node["metadata"]["name"] in allocatable:
            node["status"]["allocatable"]["ephemeral-storage"] = allocatable[node["metadata"]["name"]]
    for name, node, amount in pods:
        org.pods.append(make_pod(name, "runai-rnd-a", node=node, priority=50,
                                 containers=[{"name": "main", "requests": {"cpu": "1", "ephemeral-storage": amount}}]))
    org.load()


@pytest.fixture
def stored(hetero):
    """a100-big and a100-small have 500Gi of ephemeral storage each; a pod takes 400Gi on a100-big (100Gi
    free there, 500Gi on a100-small); a finished pod's 300Gi on a100-small counts for nothing."""
    give_storage(hetero.org, {"a100-big": "500Gi", "a100-small": "500Gi"},
                 [("scratch", "a100-big", "400Gi")])
    hetero.org.pods.append(make_pod("done", "runai-rnd-a", node="a100-small", phase="Succeeded",
                                    containers=[{"name": "main", "requests": {"ephemeral-storage": "300Gi"}}]))
    hetero.org.load()
    config.platform_update(actor=None, platform=hetero.a100_platform, rule_sets=["default_gpu", "default_storage"])
    return hetero


def storage_check(platform, storage, nodes=None):
    cfg = selectors.platform_config(platform=platform, nodes=nodes)
    values = engine.resolve_variables(pool_defaults=cfg.pool_defaults, platform_defaults={},
                                      user_values={"USER_STORAGE": storage})
    return engine.check_rules(cfg.rules, values=values, nodes=cfg.nodes), cfg


def test_free_storage_is_allocatable_minus_the_active_pods_requests(stored):
    views = {n.name: n for n in selectors.pool_node_views(pool=stored.pool)}
    assert (views["a100-big"].storage_bytes, views["a100-big"].storage_allocatable_bytes) == (100 * GIB, 500 * GIB)
    assert (views["a100-small"].storage_bytes, views["a100-small"].storage_allocatable_bytes) == (500 * GIB, 500 * GIB)


def test_a_storage_rule_satisfied_by_one_node_only_passes(stored):
    failures, cfg = storage_check(stored.a100_platform, "200Gi")
    assert [n.name for n in cfg.nodes] == ["a100-big", "a100-small"]
    assert failures == []  # a100-small has 500Gi free
    # Without a100-small, the same request is refused: only that node satisfies the rule.
    big_only = [n for n in selectors.pool_node_views(pool=stored.pool) if n.name != "a100-small"]
    [failure], _ = storage_check(stored.a100_platform, "200Gi", nodes=big_only)
    assert failure.message == "Storage 200Gi exceeds node capacity 100Gi"
    assert failure.reasons == ("a100-big: K8_STORAGE 100Gi < USER_STORAGE 200Gi",)


def test_a_storage_rule_no_node_satisfies_is_refused_with_the_reason_per_node(stored):
    [failure], _ = storage_check(stored.a100_platform, "600Gi")
    assert failure.message == "Storage 600Gi exceeds node capacity 500Gi"
    assert failure.reasons == ("a100-big: K8_STORAGE 100Gi < USER_STORAGE 600Gi",
                               "a100-small: K8_STORAGE 500Gi < USER_STORAGE 600Gi")


def test_the_per_node_view_shows_storage_used_and_capacity(client, stored, users):
    client.force_login(users["researcher"])
    response = client.get(reverse("pool-platforms", args=[stored.pool.pk]))
    rows = {row[0]: row for row in table_rows(response, "resources")}
    assert rows["a100-big"][6] == "400 / 500"
    assert rows["a100-small"][6] == "0 / 500"
    # l40s-1 keeps the emulator's realistic default: 989560464Ki allocatable (943.7 GiB).
    assert rows["l40s-1"][6] == "0 / 943.7"
    assert "not mirrored" not in response.content.decode()
