"""Will it fit? on the pages and the API (issue 23, point 1): a scripted pool of six 8-GPU nodes in two zones
(and two racks, the pool's own topology label), with pods of three projects running. The pool page, the
overview's compact line and `GET /api/v1/node-pools/{id}/fit` give the same figures; "what would make room"
names the over-quota pods of the owner above its deserved quota, never a non-preemptible pod, and names a pod
only to whoever may see its project."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

RACK = "example.com/rack"


@pytest.fixture
def h100(org):
    """Pool h100 (gpu-type=H100): zone a holds n1 (8 free), n2 (4 free), n3 (2 free); zone b holds n4 (6 free),
    n5 (0 free), n6 (not Ready, 8 free). Racks: n1, n2, n4 in r1; n3, n5 in r2; n6 none.
    ops-a (deserved 0) runs 8 preemptible GPUs; rnd-b an inference pod (non-preemptible) of 4."""
    from kubesim import make_node
    from nodepools import services as pool_services
    from nodepools.demo_cluster import operand_pods

    pool = pool_services.pool_create(actor=None, cluster=org.cluster, name="h100", label_key="gpu-type",
                                     label_value="H100")
    spec = [("n1", "a", "r1", True), ("n2", "a", "r1", True), ("n3", "a", "r2", True), ("n4", "b", "r1", True),
            ("n5", "b", "r2", True), ("n6", "b", None, False)]
    new = [make_node(name, gpus=8, zone=f"us-east-1{zone}", ready=ready,
                     labels={"gpu-type": "H100", **({RACK: rack} if rack else {})}) for name, zone, rack, ready in spec]
    org.nodes += new
    org.pods += operand_pods(new)
    org.load()
    org.run("ops-big", org.ops_a, "n2", gpus=4, created="2025-01-01T00:00:01Z")
    org.run("ops-small", org.ops_a, "n3", gpus=4, created="2025-01-01T00:00:02Z")
    org.run("rnd-b-serve", org.rnd_b, "n3", gpus=2, priority=125)
    org.run("rnd-b-train", org.rnd_b, "n4", gpus=2)
    org.run("ops-full", org.ops_a, "n5", gpus=8)
    return pool


def test_the_pool_page_says_what_fits_now_per_size_per_zone_and_as_a_histogram(client, users, h100):
    client.force_login(users["researcher"])
    html = client.get(reverse("pool-detail", args=[h100.pk])).content.decode()
    section = html[html.index('id="pool-fit"'):html.index("</section>", html.index('id="pool-fit"'))]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section))
    # Ready nodes n1..n5: free 8, 4, 2, 6, 0 = 20 GPUs; n6 is not Ready.
    assert "20 GPUs free on 5 Ready GPU nodes; the most free on one node is 8." in text
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r'data-gpus="(\d+)">(.*?)</tr>', section, re.S)}
    cells = {k: re.findall(r">([^<>]*)</td>", v) for k, v in rows.items()}
    # pods that fit now, GPUs left over, largest gang in one zone, the zone
    assert cells[1] == ["1", "20", "0", "14", "us-east-1a"]
    assert cells[2] == ["2", "10", "0", "7", "us-east-1a"]
    assert cells[4] == ["4", "4", "4", "3", "us-east-1a"]
    assert cells[8] == ["8", "1", "12", "1", "us-east-1a"]
    histogram = re.findall(r'<tr><td class="num">(\d+)</td><td class="num">(\d+)</td>',
                           section[section.index('id="fit-histogram"'):])
    assert histogram == [("0", "1"), ("2", "1"), ("4", "1"), ("6", "1"), ("8", "1")]


def test_a_pool_naming_its_topology_label_groups_gangs_by_it(client, users, h100):
    from nodepools import services as pool_services

    pool_services.pool_update(actor=None, pool=h100, topology_key=RACK)
    client.force_login(users["sysadmin"])
    body = client.get(f"/api/v1/node-pools/{h100.pk}/fit/").json()
    fragmentation = body["fragmentation"]
    assert fragmentation["topology_key"] == RACK
    # Rack r1: n1 (8), n2 (4), n4 (6) free; r2: n3 (2), n5 (0).
    assert {d["name"]: Decimal(d["gpus_free"]) for d in fragmentation["domains"]} == {"r1": 18, "r2": 2}
    gang = {g["gpus_per_pod"]: (g["pods"], g["pods_in_one_domain"], g["domain"]) for g in fragmentation["largest_gang"]}
    assert gang[2] == (10, 9, "r1") and gang[4] == (4, 4, "r1")
    assert fragmentation["nodes_without_topology_label"] == 0  # n6 is not Ready: not counted at all
    page = client.get(reverse("pool-detail", args=[h100.pk])).content.decode()
    assert f"<code>{RACK}</code>" in page


def test_the_topology_label_is_checked_as_a_kubernetes_label_key(client, users, h100):
    client.force_login(users["sysadmin"])
    answer = client.patch(f"/api/v1/node-pools/{h100.pk}/", {"topology_key": "not a key!"},
                          content_type="application/json")
    assert answer.status_code == 400
    assert "topology_key" in answer.json()["errors"]


def test_what_would_make_room_names_the_over_quota_pods_and_whose_they_are(client, users, h100, api):
    # Two pods of 8: n1 has 8 free; the second needs a node emptied. ops-a (deserved 0, 16 GPUs) is over quota;
    # on n5 its 8 GPUs are all that runs: reclaiming ops-full makes room. rnd-b's inference pod is never taken.
    body = api(users["sysadmin"]).get(f"/api/v1/node-pools/{h100.pk}/fit/", {"pods": 2, "gpus": 8}).json()
    room = body["room"]
    assert room["fits"] is True
    assert [(v["pod"], v["project"], v["department"], v["action"]) for v in room["victims"]] == [
        ("ops-full", "ops-a", "ops", "reclaim")]
    assert room["by_owner"] == [{"project": "ops-a", "department": "ops", "gpus": "8.000", "pods": 1}]
    # A researcher of rnd-a may not see ops-a's pods: their owner, not their names.
    hidden = api(users["researcher"]).get(f"/api/v1/node-pools/{h100.pk}/fit/", {"pods": 2, "gpus": 8}).json()["room"]
    assert hidden["victims"][0]["pod"] is None and hidden["victims"][0]["project"] == "ops-a"
    # On the page: the form's answer in words.
    client.force_login(users["researcher"])
    page = client.get(reverse("pool-detail", args=[h100.pk]), {"pods": 2, "gpus": 8}).content.decode()
    assert "Room for 2 pods of 8 GPUs by reclaiming over-quota use: ops-a (ops): 8 GPUs in 1 pod." in page
    assert "a workload of project ops-a" in page


def test_no_room_when_only_non_preemptible_or_in_quota_work_holds_it(api, users, h100):
    body = api(users["sysadmin"]).get(f"/api/v1/node-pools/{h100.pk}/fit/",
                                      {"pods": 4, "gpus": 8, "domain": "us-east-1a"}).json()
    assert body["room"]["fits"] is False
    assert body["room"]["domain"] == "us-east-1a"
    assert "4 asked" in body["room"]["explanation"]


def test_no_room_is_asked_of_anyone_when_nobody_is_over_quota(api, users, org):
    # The a100 pool of the organisation: nothing runs, nobody borrows; two pods of 4 fit on the free GPUs.
    room = api(users["sysadmin"]).get(f"/api/v1/node-pools/{org.a100.pk}/fit/", {"pods": 3, "gpus": 4}).json()["room"]
    assert room["fits"] is False and room["victims"] == []


def test_what_would_make_room_says_first_when_nothing_can(client, users, org, api):
    """1 × 8 GPUs in a pool of 4-GPU nodes: no reclaim helps; it says so first and lists nobody as if they
    would — even with over-quota preemptible pods running there."""
    org.run("borrowed", org.rnd_b, "a100-1", gpus=4, priority=50)
    answer = api(users["sysadmin"]).get(f"/api/v1/node-pools/{org.a100.pk}/fit/", {"pods": 1, "gpus": 8}).json()
    room = answer["room"]
    assert (room["fits"], room["never"], room["victims"], room["by_owner"]) == (False, True, [], [])
    assert room["explanation"] == "Nothing can make room: no node of a100 has 8 GPUs (the largest has 4)."
    client.force_login(users["sysadmin"])
    page = client.get(reverse("pool-detail", args=[org.a100.pk]), {"pods": 1, "gpus": 8}).content.decode()
    box = page[page.index('id="make-room"'):]
    box = box[:box.index("</div>")]
    assert "<p>Nothing can make room: no node of a100 has 8 GPUs (the largest has 4).</p>" in box
    assert 'id="make-room-victims"' not in box and "borrowed" not in box


def test_a_bad_shape_is_a_clear_error_naming_the_field(api, users, h100, client):
    answer = api(users["sysadmin"]).get(f"/api/v1/node-pools/{h100.pk}/fit/", {"pods": "x", "gpus": 8})
    assert answer.status_code == 400
    assert answer.json()["errors"] == {"pods": ["pods is a whole number from 1 to 1000."]}
    client.force_login(users["sysadmin"])
    page = client.get(reverse("pool-detail", args=[h100.pk]), {"pods": 0, "gpus": 8})
    assert page.status_code == 200 and "pods is a whole number from 1 to 1000." in page.content.decode()


def test_the_overview_has_a_compact_line_per_pool_and_the_cluster_api_the_same(client, users, h100, api, org):
    client.force_login(users["sysadmin"])
    html = client.get(reverse("cluster-overview", args=[org.cluster.pk])).content.decode()
    row = html[html.index('data-pool="h100"'):]
    row = row[:row.index("</tr>")]
    assert "20 GPUs free: 1×8 · 4×4 · 10×2 · 20×1" in row
    body = api(users["cluster_viewer"]).get(f"/api/v1/clusters/{org.cluster.pk}/fit/").json()
    lines = {p["pool"]: p["fragmentation"]["summary"] for p in body["pools"]}
    assert lines["h100"] == "20 GPUs free: 1×8 · 4×4 · 10×2 · 20×1"
    assert set(lines) == {"default", "a100", "h100"}


def test_nobody_outside_the_cluster_reads_a_pools_fit(api, users, h100, org):
    assert api(users["nobody"]).get(f"/api/v1/node-pools/{h100.pk}/fit/").status_code == 404
    assert api(users["nobody"]).get(f"/api/v1/clusters/{org.cluster.pk}/fit/").status_code == 404
