"""A pool's GPU capacity limit and its Karpenter NodePool's limits["nvidia.com/gpu"] are one value, and the
quota grid measures over-subscription against the most the pool may grow to."""
from __future__ import annotations

import re

from django.urls import reverse

from access.rules import Role
from nodepools import services as pool_services
from nodepools.models import NodePool
from projects import services as project_services
from tests.conftest import make_user
from tests.nodepools.test_sync import operands
from tests.projects.test_views_quota import summary_of

from .conftest import NODEPOOLS, add_nodepool


def backed(lab, name, **kw):
    return pool_services.pool_create(actor=None, cluster=lab.cluster, name=name, label_key="karpenter.sh/nodepool",
                                     label_value=name, **kw)


def admin(client):
    user = make_user("sysadmin")
    project_services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=user)
    client.force_login(user)
    return user


def test_the_pool_form_writes_the_gpu_limit_through_to_the_nodepool(lab, client):
    add_nodepool(lab.emu, "a100-standard")
    pool = backed(lab, "a100-standard", gpu_limit=40)
    admin(client)
    form = client.get(reverse("pool-edit", args=[pool.pk])).content.decode()
    assert "backed by the Karpenter NodePool a100-standard" in re.sub(r"<[^>]+>", "", form)
    response = client.post(reverse("pool-edit", args=[pool.pk]), {
        "name": pool.name, "label_key": pool.label_key, "label_value": pool.label_value, "description": "",
        "gpu_placement": "binpack", "cpu_placement": "binpack", "gpu_limit": "24"})
    assert response.status_code == 302
    assert NodePool.objects.get(pk=pool.pk).gpu_limit == 24
    limits = lab.emu.get(NODEPOOLS, "a100-standard")["spec"]["limits"]
    assert limits == {"cpu": "960", "memory": "8Ti", "nvidia.com/gpu": "24"}  # the other limits are kept

    # An empty limit removes the NodePool's GPU limit too.
    client.post(reverse("pool-edit", args=[pool.pk]), {
        "name": pool.name, "label_key": pool.label_key, "label_value": pool.label_value, "description": "",
        "gpu_placement": "binpack", "cpu_placement": "binpack", "gpu_limit": ""})
    assert NodePool.objects.get(pk=pool.pk).gpu_limit is None
    assert "nvidia.com/gpu" not in lab.emu.get(NODEPOOLS, "a100-standard")["spec"]["limits"]


def test_a_pool_form_edit_the_cluster_refuses_keeps_the_pools_value(lab, client):
    add_nodepool(lab.emu, "a100-standard")
    pool = backed(lab, "a100-standard", gpu_limit=40)
    admin(client)
    lab.emu.fail_next(n=1, status=409, path_prefix="/apis/karpenter.sh/v1/nodepools/a100-standard")
    response = client.post(reverse("pool-edit", args=[pool.pk]), {
        "name": pool.name, "label_key": pool.label_key, "label_value": pool.label_value, "description": "",
        "gpu_placement": "binpack", "cpu_placement": "binpack", "gpu_limit": "24"})
    assert response.status_code == 200
    assert "changed in the cluster meanwhile: nothing was written" in response.content.decode()
    assert NodePool.objects.get(pk=pool.pk).gpu_limit == 40
    assert lab.emu.get(NODEPOOLS, "a100-standard")["spec"]["limits"]["nvidia.com/gpu"] == "40"


def test_a_limit_changed_in_the_cluster_becomes_the_pools_limit(transactional_db, lab):
    # transactional: on PostgreSQL the leader's tasks run in a thread of their own (their own connection).
    add_nodepool(lab.emu, "t4-best-effort", "t4-best-effort")
    pool = backed(lab, "t4-best-effort", gpu_limit=32)
    lab.start().synced()
    lab.emu.update(NODEPOOLS, "t4-best-effort", {"spec": {"limits": {"nvidia.com/gpu": "12"}}}, patch_type="merge")
    lab.until(lambda: NodePool.objects.get(pk=pool.pk).gpu_limit == 12)
    from audit.models import AuditEvent

    event = AuditEvent.objects.filter(object_type="nodepool", object_id=str(pool.pk)).latest("pk")
    assert (event.before["gpu_limit"], event.after["gpu_limit"], event.actor) == (32, 12, None)


def test_the_quota_grid_shows_ready_gpus_and_the_most_a_pool_may_grow_to(lab, client):
    from kubesim import make_node

    add_nodepool(lab.emu, "h100-prod", "h100-prod")
    pool = backed(lab, "h100-prod", gpu_limit=64)
    # Two H100 nodes Karpenter launched: 16 GPUs ready now.
    for i in (1, 2):
        lab.emu.add_node(make_node(f"h100-{i}", gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81559,
                                   labels={"karpenter.sh/nodepool": "h100-prod"}))
        for pod in operands(f"h100-{i}"):  # the NVIDIA operands, else the node is not ready
            lab.emu.add_pod(pod)
    lab.start().synced()
    quota = pool.quotas.get(department=lab.rnd)
    project_services.quota_update(actor=None, quota=quota, expected_version=None, gpu_deserved=24)
    admin(client)
    html = client.get(reverse("quota-grid", args=[lab.cluster.pk])).content.decode()
    rows, marked = summary_of(html)
    column = [p.name for p in NodePool.objects.filter(cluster=lab.cluster).order_by("-is_default", "created", "pk")
              ].index("h100-prod")
    assert rows["Ready / total GPUs"][column] == "16 / 16"
    assert rows["Most GPUs it may grow to (Karpenter limit)"][column] == "64"
    assert rows["Over-subscription (Σ deserved / ready)"][column].startswith("1.5")  # 24 / 16: over now ...
    assert rows["Over-subscription at that size (Σ deserved / limit)"][column] == "0.38"  # ... not at full size
    assert "h100-prod" in marked
    assert rows["Most GPUs it may grow to (Karpenter limit)"][0] == ""  # the default pool does not grow

    # The overview's capacity table says the same.
    overview = client.get(reverse("cluster-overview", args=[lab.cluster.pk])).content.decode()
    row = re.search(r'<tr data-pool="h100-prod">.*?</tr>', overview, re.S).group(0)
    assert re.search(r'data-growth="most">64<', row) and re.search(r'data-growth="ratio">0\.38<', row)

    # Deserved beyond the most it may grow to: over-subscribed even at full size.
    project_services.quota_update(actor=None, quota=pool.quotas.get(department=lab.rnd), expected_version=None,
                                  gpu_deserved=80)
    html = client.get(reverse("quota-grid", args=[lab.cluster.pk])).content.decode()
    rows, _ = summary_of(html)
    assert rows["Over-subscription at that size (Σ deserved / limit)"][column] == "1.25 over-subscribed even at full size"
    growth = re.search(r'data-summary="growth-ratio".*?</tr>', html, re.S).group(0)
    assert 'class="num oversubscribed" data-pool="h100-prod"' in growth
