"""The demo shows GPU sharing (issue 30, point 8): `manage.py demo` loads a MIG pool whose nodes publish
slices by profile, a time-sliced pool, KAI fractions running beside their GPU's reservation pod, quota of
both departments in GPU-equivalents (decimals), and a statement whose lines say their unit, quantity and
rate — what a newcomer sees on the node, pool and statement pages."""
from __future__ import annotations

import re
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from kube import gpu as kube_gpu
from ledger.selectors import Month, department_statement
from nodepools.models import Node, NodePool, Pod
from projects.models import Department, Quota

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def demo_data(kept_db):
    """The demo, loaded once for the module (its tests only read: `kept_db`)."""
    with kept_db.unblock():
        call_command("demo", stdout=StringIO())


@pytest.fixture
def demo(demo_data, client):
    client.force_login(get_user_model().objects.get(username="admin"))
    return client


def cells(html: str, table_id: str) -> dict[str, list[str]]:
    """The rows of a table by their data-profile, each as its cells' texts."""
    body = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.S).group(0)
    return {m.group(1): [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", m.group(2), re.S)]
            for m in re.finditer(r'<tr data-profile="([^"]+)">(.*?)</tr>', body, re.S)}


def test_a_node_of_the_mig_pool_shows_its_slices_by_profile_and_what_is_allocated(demo):
    node = Node.objects.get(name="a100-mig-01")
    assert node.pool.name == "a100-mig"
    page = demo.get(f"/nodes/{node.pk}/").content.decode()
    assert "MIG, mixed strategy, layout <code>all-balanced</code>" in page
    slices = cells(page, "node-slices")
    # all-balanced on 4 A100 80GB: 4 × 3g.40gb, 4 × 2g.20gb, 8 × 1g.10gb; three notebooks hold 1g.10gb slices
    # and an inference service a 3g.40gb one.
    assert {p: (row[2], row[4]) for p, row in slices.items()} == {
        "3g.40gb": ("4", "1"), "2g.20gb": ("4", "0"), "1g.10gb": ("8", "3")}
    assert slices["1g.10gb"][1] == "nvidia.com/mig-1g.10gb"


def test_the_mig_pool_page_shows_slices_free_and_quota_in_gpu_equivalents(demo):
    pool = NodePool.objects.get(name="a100-mig")
    page = demo.get(f"/pools/{pool.pk}/").content.decode()
    slices = cells(page, "pool-slices")
    # 3 nodes: 24 slices of 1g.10gb, 5 held by notebooks; 12 of 3g.40gb, 2 held by chat's service.
    assert (slices["1g.10gb"][1], slices["1g.10gb"][3]) == ("24", "5")
    assert (slices["3g.40gb"][1], slices["3g.40gb"][3]) == ("12", "2")
    quotas = re.search(r'<table[^>]*id="pool-quotas".*?</table>', page, re.S).group(0)
    assert re.search(r"NLP <span class=\"k8s-name\" title=\"Kubernetes name\">team-nlp</span></a>.*?<td class=\"num\">1\.5</td>", quotas, re.S)
    assert Quota.objects.get(pool=pool, project__name="team-nlp").gpu_deserved == Decimal("1.5")
    assert Quota.objects.get(pool__name="a10g", project__name="serve-vision").gpu_deserved == Decimal("2.5")
    # A project's allocation there is in GPU-equivalents: 3 slices of 7 of an A100.
    vision = Quota.objects.with_allocation().get(pool=pool, project__name="team-vision")
    assert vision.gpu_allocated == Decimal("0.429")


def test_the_time_sliced_pool_counts_replicas_as_shares_of_its_gpus(demo):
    node = Node.objects.get(name="l4-01")
    assert node.pool.name == "l4-shared" and node.gpu_product == "NVIDIA-L4"
    page = demo.get(f"/nodes/{node.pk}/").content.decode()
    assert re.search(r'id="node-gpu-sharing">time-slicing × 4 replicas: 4 of 16 in use', page), \
        re.search(r'id="node-gpu-sharing">[^<]*', page)
    replicas = Pod.objects.get(name="search-replica-1")
    assert (replicas.gpu_unit, replicas.gpu_units, replicas.gpus) == ("replica:4", 1, Decimal("0.25"))


def test_fractional_pods_run_on_a_gpu_held_by_its_reservation_pod(demo):
    halves = Pod.objects.filter(namespace="runai-serve-vision", name__startswith="vision-frac-")
    assert [(p.phase, p.node.name, p.gpus, p.gpu_unit) for p in halves] == [
        ("Running", "a10g-01", Decimal("0.5"), kube_gpu.UNIT_FRACTION)] * 2
    reservations = Pod.objects.filter(namespace=kube_gpu.RESERVATION_NAMESPACE)
    assert reservations.count() == 2 and {p.gpus for p in reservations} == {Decimal(0)}  # nobody's allocation
    node = Node.objects.get(name="a10g-01")
    page = demo.get(f"/nodes/{node.pk}/").content.decode()
    assert "4 fractional pods holding 2 GPUs" in page


def test_the_statements_show_slices_replicas_and_fractions_with_their_units_and_rates(demo):
    manager = get_user_model().objects.get(username="rnd-manager")
    rnd = Department.objects.get(name="rnd")
    month = Month.parse(None)
    lines = department_statement(user=manager, department=rnd, month=month).lines
    notebooks = [l for l in lines if l.labels["project"] == "Vision (team-vision)" and l.unit == "1g.10gb"]
    assert notebooks and notebooks[0].quantity > 0 and notebooks[0].rate == Decimal("0.40")  # its profile's own rate
    assert notebooks[0].quantity_label == "slice-hours"
    speech = [l for l in lines if l.unit == "2g.20gb"]
    # No rate of its own: the A100 80GB's × 2/7, per slice-hour.
    assert speech and speech[0].rate is not None and speech[0].rate < Decimal("2.40") * 2 / 7 + Decimal("0.01")
    mlops = Department.objects.get(name="ml-ops")
    admin = get_user_model().objects.get(username="mlops-admin")
    units = {l.unit for l in department_statement(user=admin, department=mlops, month=month).lines}
    assert {"3g.40gb", "replica:4", kube_gpu.UNIT_FRACTION, ""} <= units
    demo.force_login(admin)
    page = demo.get(f"/departments/{mlops.pk}/statement/").content.decode()
    for text in ("MIG 3g.40gb", "replica (1/4 GPU)", "GPU-equivalent", "replica-hours", "slice-hours"):
        assert text in page, text
