"""The pages' dearest figures are computed once per change of the fleet, never shown older than its rows.

A page's sums over every pod and node (usage per pool and project, the nodes' GPU room, the pending pods) are
kept across requests while no node or pod row of any cluster changed: the database's triggers raise a cluster's
data version at each write, whoever writes (the sync's upserts, the ORM, a cascade), in the writing transaction.
"""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.pages import page_text

pytestmark = pytest.mark.django_db


def version(cluster) -> int:
    from nodepools.models import DataVersion

    found = DataVersion.objects.filter(cluster_id=cluster.pk).values_list("seq", flat=True).first()
    return found or 0


def test_every_write_of_a_node_or_pod_raises_its_clusters_version_and_only_its(org):
    from nodepools import services as pool_services
    from nodepools.models import Node, Pod

    other = pool_services.cluster_create(actor=None, name="other")
    theirs = version(other)
    mark = version(org.cluster)
    assert mark > 0  # the org's nodes and pods were written

    def raised() -> bool:
        nonlocal mark
        now = version(org.cluster)
        moved, mark = now > mark, now
        return moved

    org.run("train-1", org.rnd_a, "a100-1", gpus=2)  # the sync's writer: an upsert of the cluster's objects
    assert raised()
    org.load()  # the same objects again: nothing changed, nothing raised
    assert not raised()
    Pod.objects.filter(name="train-1").update(phase="Succeeded")  # the ORM, a queryset update
    assert raised()
    Pod.objects.get(name="train-1").delete()
    assert raised()
    Node.objects.filter(name="v100-1").update(unschedulable=True)
    assert raised()
    node = Node.objects.get(name="v100-2")
    node.zone = "zone-b"
    node.save()
    assert raised()
    with connection.cursor() as cursor:  # whoever writes, even past the ORM
        cursor.execute("UPDATE nodepools_node SET instance_type = 'p4d.24xlarge' WHERE name = 'a100-2'")
    assert raised()
    assert version(other) == theirs


def _overview_free(client, cluster, pool: str) -> str:
    html = client.get(reverse("cluster-overview", args=[cluster.pk])).content.decode()
    rows = re.findall(rf'<tr[^>]*data-pool="{pool}"[^>]*>(.*?)</tr>', html, re.S)
    from tests.pages import text

    found = [m.group(0) for r in rows for m in [re.search(r"\d+ GPUs? free", text(r))] if m]
    assert found, (pool, [text(r) for r in rows])
    return found[0]


def test_a_page_shows_a_change_at_once_and_reads_no_pod_while_the_fleet_holds_still(client, org, users):
    from nodepools.models import Pod

    client.force_login(users["sysadmin"])
    assert _overview_free(client, org.cluster, "a100") == "8 GPUs free"
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    assert _overview_free(client, org.cluster, "a100") == "5 GPUs free"
    pool = client.get(reverse("pool-detail", args=[org.a100.pk]))
    assert re.search(r"3 allocated, 5 free", page_text(pool)), page_text(pool)[:600]

    # Nothing changed since: the next overview, pools table, quota grid, department and project pages sum no pod, and say the same.
    pods_table = Pod._meta.db_table
    for name, url in [("overview", reverse("cluster-overview", args=[org.cluster.pk])),
                      ("pools table", reverse("pool-list")), ("quota grid", reverse("quota-grid", args=[org.cluster.pk])),
                      ("department", reverse("department-detail", args=[org.rnd.pk])),
                      ("project", reverse("project-detail", args=[org.rnd_a.pk]))]:
        first = client.get(url).content.decode()
        with CaptureQueriesContext(connection) as queries:
            again = client.get(url).content.decode()
        summing = [q["sql"] for q in queries.captured_queries
                   if pods_table in q["sql"] and re.search(r"\bSUM\(", q["sql"])]
        assert not summing, (name, summing)
        assert _text(again) == _text(first), name

    # A pod ending (as the sync writes it) shows on the very next page: no hint, no wait.
    Pod.objects.filter(name="train-1").update(phase="Succeeded")
    assert _overview_free(client, org.cluster, "a100") == "8 GPUs free"


def _text(html: str) -> str:
    """The page's words without what differs from one rendering to the next (tokens, request ids, ages)."""
    from tests.pages import text

    words = text(re.sub(r'<(script|input)[^>]*>', "", html))
    return re.sub(r"\d+ (seconds?|minutes?) ago|just now", "", words)


def test_the_usage_per_scheduler_sums_to_the_usage_per_project_read_in_one_pass(org):
    """What a scheduler counts against its queues (its own pods) and what the pages count (every pod) are one
    reading of the pods: per pool and project, the schedulers' sums are the project's."""
    from nodepools.memo import reads_scope
    from nodepools.selectors import pod_usage, pod_usage_by_scheduler

    org.run("kai-1", org.rnd_a, "a100-1", gpus=2, priority=50)
    org.run("kai-2", org.rnd_a, "a100-2", gpus=1, priority=125)
    for pod in org.pods[-2:]:
        pod["spec"]["schedulerName"] = "kai-scheduler"
    org.run("plain", org.rnd_a, "a100-2", gpus=1, priority=50)
    org.run("other", org.ops_a, "v100-1", gpus=3, priority=50)
    pools = [org.a100.pk, org.default.pk]
    with reads_scope(), CaptureQueriesContext(connection) as ctx:
        usage, split = pod_usage(pools), pod_usage_by_scheduler(pools)
    assert len([q for q in ctx.captured_queries if "nodepools_pod" in q["sql"]]) == 1
    rnd_a = {r["scheduler"]: (r["gpu"], r["np"]) for r in split
             if r["pool_id"] == org.a100.pk and r["project_id"] == org.rnd_a.pk}
    assert rnd_a == {"kai-scheduler": (3, 1), "default-scheduler": (1, None)}
    row = next(r for r in usage if r["pool_id"] == org.a100.pk and r["project_id"] == org.rnd_a.pk)
    assert (row["gpu"], row["np"], row["pods"]) == (4, 1, 3)
    ops = next(r for r in usage if r["project_id"] == org.ops_a.pk)
    assert (ops["pool_id"], ops["gpu"], ops["np"]) == (org.default.pk, 3, None)
