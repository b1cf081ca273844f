"""Will it fit? per MIG profile (issue 30, point 6): the pool page and the fit API count each profile in its
own slices — how many pods of one slice fit now, pods of 2 and 4 slices, the largest gang, the fragmentation
in words — on the nodes that publish it; a slice is no whole GPU and no slice of another profile. The pool
page's MIG slices, its "Will it fit?" and the fit API show the same figures. On the mirror of a scripted
cluster (tests/conftest.py `Org`), read over HTTP like the other fit pages."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from kubesim import make_node, make_pod
from nodepools.demo_cluster import operand_pods
from tests.pages import page_text
from tests.pages import text as text_of

pytestmark = pytest.mark.django_db

A100_80 = "NVIDIA-A100-SXM4-80GB"


def slices_pod(name, project, node, profile, count, **extra):
    return make_pod(name, f"runai-{project.name}", node=node, containers=[
        {"name": "main", "requests": {"cpu": "1", "memory": "1Gi", f"nvidia.com/mig-{profile}": count}}], **extra)


@pytest.fixture
def mig(org):
    """Pool a100-mig: mig-1 and mig-2 (2 A100 80GB each, all-3g.40gb: 4 slices of 3g.40gb each), mig-3 (1 A100
    80GB, all-1g.10gb: 7 slices of 1g.10gb). rnd-b holds 3 slices of 3g.40gb on mig-1 and 1 on mig-2 (1 and 3
    free: 4 in all), and 2 of 1g.10gb on mig-3 (5 free)."""
    from nodepools import services as pool_services

    org.mig = pool_services.pool_create(actor=None, cluster=org.cluster, name="a100-mig", label_key="gpu-type",
                                        label_value="A100-MIG")
    nodes = [make_node("mig-1", gpus=2, gpu_product=A100_80, mig_config="all-3g.40gb", labels={"gpu-type": "A100-MIG"}),
             make_node("mig-2", gpus=2, gpu_product=A100_80, mig_config="all-3g.40gb", labels={"gpu-type": "A100-MIG"}),
             make_node("mig-3", gpus=1, gpu_product=A100_80, mig_config="all-1g.10gb", labels={"gpu-type": "A100-MIG"})]
    org.nodes += nodes
    org.pods += operand_pods(nodes) + [
        slices_pod("b-big", org.rnd_b, "mig-1", "3g.40gb", 3), slices_pod("b-one", org.rnd_b, "mig-2", "3g.40gb", 1),
        slices_pod("b-small", org.rnd_b, "mig-3", "1g.10gb", 2)]
    org.load()
    return org


def fit_of(client, pool, **query):
    answer = client.get(f"/api/v1/node-pools/{pool.pk}/fit/", query)
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_the_fit_api_counts_each_mig_profile_in_its_own_slices(mig, users, client):
    client.force_login(users["sysadmin"])
    frag = fit_of(client, mig.mig)["fragmentation"]
    by_profile = {m["profile"]: m for m in frag["mig_slices"]}
    assert list(by_profile) == ["1g.10gb", "3g.40gb"]  # by share of a GPU
    small, big = by_profile["1g.10gb"], by_profile["3g.40gb"]
    # How many pods of one 1g.10gb slice fit now: its 5 free slices, all on mig-3.
    assert (small["nodes"], small["slices"], small["slices_free"], small["most_free_on_a_node"]) == (1, 7, 5, 5)
    assert small["pods_that_fit"][0] == {"slices_per_pod": 1, "pods": 5, "slices_stranded": 0}
    # 3g.40gb: 4 free (1 on mig-1, 3 on mig-2): the largest gang of one-slice pods is 4, but only one pod of 2
    # slices fits and none of 4: the fragmentation, in slices.
    assert (big["nodes"], big["slices"], big["slices_free"], big["most_free_on_a_node"]) == (2, 8, 4, 3)
    assert big["pods_that_fit"] == [{"slices_per_pod": 1, "pods": 4, "slices_stranded": 0},
                                    {"slices_per_pod": 2, "pods": 1, "slices_stranded": 2},
                                    {"slices_per_pod": 4, "pods": 0, "slices_stranded": 4}]
    assert big["largest_gang"][0]["pods"] == 4
    assert big["free_slices_histogram"] == [{"free_slices": 1, "nodes": 1}, {"free_slices": 3, "nodes": 1}]
    assert big["summary"] == ("4 3g.40gb slices are free on 2 Ready nodes that publish them; the most free on one "
                              "node is 3, so 4 pods of 1 slice fit now.")
    assert small["summary"] == ("5 1g.10gb slices are free on 1 Ready node that publishes them; the most free on "
                                "one node is 5, so 5 pods of 1 slice fit now.")
    # No slice is a whole GPU: the pool's free GPU-equivalents are the pool's figure, but no pod of whole GPUs fits.
    pool = client.get(f"/api/v1/node-pools/{mig.mig.pk}/").json()
    assert frag["gpus_free"] == pool["gpu_free"]
    assert {row["gpus_per_pod"]: row["pods"] for row in frag["pods_that_fit"]} == {1: 0, 2: 0, 4: 0, 8: 0}


def test_the_pool_page_shows_the_same_slices_as_the_fit_api(mig, users, client):
    client.force_login(users["sysadmin"])
    api_slices = {m["profile"]: m for m in fit_of(client, mig.mig)["fragmentation"]["mig_slices"]}
    shapes = {s["profile"]: s for s in client.get(f"/api/v1/node-pools/{mig.mig.pk}/").json()["gpu_shapes"]["slices"]}
    html = client.get(reverse("pool-detail", args=[mig.mig.pk])).content.decode()
    fit_table = html[html.index('id="fit-slices"'):]
    fit_table = fit_table[:fit_table.index("</table>")]
    pool_table = html[html.index('id="pool-slices"'):]
    pool_table = pool_table[:pool_table.index("</table>")]
    for profile, figures in api_slices.items():
        # "Will it fit?": free slices, the most on one node, pods of 2 and of 4 slices, the gang in one domain.
        row = re.search(rf'<tr data-profile="{re.escape(profile)}">(.*?)</tr>', fit_table, re.S).group(1)
        cells = [text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        pods = {r["slices_per_pod"]: r["pods"] for r in figures["pods_that_fit"]}
        assert cells[:5] == [profile, str(figures["slices_free"]), str(figures["most_free_on_a_node"]),
                             str(pods[2]), str(pods[4])], (profile, cells)
        # The pool's MIG slices table (and the pool API) say the same free slices and the most on one node.
        row = re.search(rf'<tr data-profile="{re.escape(profile)}">(.*?)</tr>', pool_table, re.S).group(1)
        cells = [text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        assert cells[4:6] == [str(figures["slices_free"]), str(figures["most_free_on_a_node"])], (profile, cells)
        assert (shapes[profile]["free"], shapes[profile]["most_free_on_a_node"]) == (
            figures["slices_free"], figures["most_free_on_a_node"])
        assert figures["summary"] in text_of(html)


def test_a_slice_on_a_node_not_ready_is_not_free(mig, users, client):
    mig.nodes[-3]["spec"]["unschedulable"] = True  # mig-1 cordoned: its free 3g.40gb slice no longer counts
    mig.load()
    client.force_login(users["sysadmin"])
    big = {m["profile"]: m for m in fit_of(client, mig.mig)["fragmentation"]["mig_slices"]}["3g.40gb"]
    assert (big["nodes"], big["nodes_publishing"], big["slices_free"]) == (1, 2, 3)


def test_what_would_make_room_for_slices_takes_only_pods_holding_that_profile(mig, users, client):
    from decimal import Decimal

    from projects.services import quota_update

    # rnd-b is over its deserved quota (0): its preemptible pods may be reclaimed, but only its 3g.40gb pods free
    # 3g.40gb slices.
    row = mig.quota(mig.rnd_b, mig.mig)
    quota_update(actor=None, quota=row, expected_version=row.version, gpu_deserved=Decimal(0))
    client.force_login(users["sysadmin"])
    room = fit_of(client, mig.mig, pods=1, gpus=4, profile="3g.40gb")["room"]
    assert room["fits"] and room["mig_profile"] == "3g.40gb" and room["slices_per_pod"] == 4
    assert room["gpus_per_pod"] is None and room["gpu_equivalents_per_pod"] == "1.716"
    # The scheduler's order (same priority and age: by name) takes b-big first: mig-1 then has its 4 slices.
    # b-small's 1g.10gb slices would free none of them: it is never taken.
    assert [v["pod"] for v in room["victims"]] == ["b-big"]
    assert room["explanation"] == ("Room for 1 pod of 4 3g.40gb slices by reclaiming over-quota use: "
                                   "rnd-b (rnd): 1.286 GPUs in 1 pod.")
    refused = client.get(f"/api/v1/node-pools/{mig.mig.pk}/fit/", {"pods": 1, "gpus": 1, "profile": "big"})
    assert refused.status_code == 400 and "is not a MIG profile" in str(refused.json()["errors"]["profile"])
    page = page_text(client.get(reverse("pool-detail", args=[mig.mig.pk]),
                                {"pods": 1, "gpus": 4, "profile": "3g.40gb"}))
    assert "Room for 1 pod of 4 3g.40gb slices by reclaiming over-quota use" in page


def test_the_clusters_fit_and_the_overview_count_whole_gpus_apart_from_slices(mig, users, client):
    client.force_login(users["sysadmin"])
    one = fit_of(client, mig.mig)["fragmentation"]
    pools = {p["pool"]: p["fragmentation"] for p in
             client.get(f"/api/v1/clusters/{mig.cluster.pk}/fit/").json()["pools"]}
    assert pools["a100-mig"]["mig_slices"] == one["mig_slices"]
    # The free GPU-equivalents as people write them (2.427, never a float's 2.42699999999999994); no pod of
    # whole GPUs fits.
    assert pools["a100-mig"]["summary"] == one["summary"] == "2.427 GPUs free: 0×8 · 0×4 · 0×2 · 0×1"
    assert pools["a100"]["mig_slices"] == [] and pools["a100"]["pods_that_fit"][0]["pods"] == 8
