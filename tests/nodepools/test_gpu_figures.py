"""Every GPU counted, however it is shared, and the same on every surface (issue 30, points 1–3).

Generated fleets of nodes as NVIDIA's device plugin and GPU feature discovery publish them (whole GPUs, MIG
single and mixed, time-slicing, renamed `nvidia.com/gpu.shared`), some not ready (kubelet down, cordoned, an
NVIDIA operand missing), with pods holding whole GPUs, MIG slices, replicas, KAI fractions and GPU memory, KAI
reservation pods, finished pods. The figures are computed here from the objects themselves (kube.gpu on the
JSON, the console's readiness by its published rules) and read back through every surface — the pools API,
the nodes API, the pools and nodes CSV, "Will it fit?" (API), the overview page and the pool page: no
surface differs from another or from the objects.
"""
from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube import gpu
from kubesim import make_node, make_pod
from kubesim import nvidia
from nodepools.demo_cluster import operand_pods
from tests.pages import csv_of, page_text

pytestmark = pytest.mark.django_db

A100_80, A100_40, H100 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3"
POOL_LABEL = "example.com/gpu-pool"
D = Decimal


@pytest.fixture
def fleet(db):
    from nodepools import services as pool_services
    from tests.conftest import make_user
    from projects import services
    from access.rules import Role

    cluster = pool_services.cluster_create(actor=None, name="fleet")
    pools = {"default": cluster.default_pool}
    for name in ("mig", "shared"):
        pools[name] = pool_services.pool_create(actor=None, cluster=cluster, name=name, label_key=POOL_LABEL,
                                                label_value=name)
    admin = make_user("sysadmin")
    services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
    return cluster, pools, admin


# --- generated fleets -----------------------------------------------------------------------------

EXPOSURES = ("whole", "mixed", "single", "time-slicing", "renamed", "mps")
READINESS = ("ready", "ready", "kubelet", "cordoned", "no-toolkit")


@st.composite
def node_specs(draw, index):
    product = draw(st.sampled_from([A100_80, A100_40, H100]))
    exposure = draw(st.sampled_from(EXPOSURES))
    kwargs = {}
    if exposure == "mixed":
        kwargs = dict(mig_config=draw(st.sampled_from(sorted(nvidia.layouts_for(product)))), mig_strategy="mixed")
    elif exposure == "single":
        singles = sorted(n for n in nvidia.layouts_for(product) if len(nvidia.layout(product, n)) == 1)
        kwargs = dict(mig_config=draw(st.sampled_from(singles)), mig_strategy="single")
    elif exposure in ("time-slicing", "renamed", "mps"):
        kwargs = dict(gpu_replicas=draw(st.integers(2, 8)), rename_shared=exposure == "renamed",
                      sharing_strategy="mps" if exposure == "mps" else None)
    pool = draw(st.sampled_from(["default", "mig", "shared"]))
    return {"name": f"n{index}", "gpus": draw(st.integers(1, 8)), "product": product, "kwargs": kwargs,
            "pool": pool, "readiness": draw(st.sampled_from(READINESS))}


POD_KINDS = ("whole", "slice", "fraction", "memory", "reservation", "finished", "cpu")


@st.composite
def fleets(draw):
    count = draw(st.integers(1, 5))
    specs = [draw(node_specs(i)) for i in range(count)]
    pods = []
    for spec in specs:
        for j in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(POD_KINDS))
            pods.append({"node": spec["name"], "name": f"{spec['name']}-p{j}", "kind": kind,
                         "count": draw(st.integers(1, 3)),
                         "fraction": draw(st.sampled_from(["0.1", "0.25", "0.5", "0.75", "1"])),
                         "memory": draw(st.sampled_from([2000, 10240, 40960])),
                         "pick": draw(st.integers(0, 10))})
    return specs, pods


def build(specs, pods):
    """The Node and Pod objects of a generated fleet, as the API server would send them."""
    nodes, objects = [], []
    for spec in specs:
        ready = spec["readiness"] != "kubelet"
        node = make_node(spec["name"], gpus=spec["gpus"], gpu_product=spec["product"], ready=ready,
                         unschedulable=spec["readiness"] == "cordoned",
                         labels={POOL_LABEL: spec["pool"]} if spec["pool"] != "default" else None, **spec["kwargs"])
        nodes.append(node)
        operands = operand_pods([node])
        if spec["readiness"] == "no-toolkit":
            operands = [p for p in operands if "toolkit" not in p["metadata"]["name"]]
        objects += operands
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for p in pods:
        node = by_name[p["node"]]
        allocatable = node["status"]["allocatable"]
        gpu_names = sorted(r for r in allocatable if gpu.is_gpu_resource(r) and int(allocatable[r]) > 0)
        requests, annotations, namespace, phase = {"cpu": "1", "memory": "1Gi"}, None, "runai-team", "Running"
        if p["kind"] in ("whole", "finished") and gpu_names:
            # whole devices, replicas or single-strategy slices: whatever nvidia.com/gpu(.shared) is here
            plain = [r for r in gpu_names if not r.startswith(gpu.MIG_RESOURCE_PREFIX)]
            if plain:
                requests[plain[0]] = str(p["count"])
            phase = "Succeeded" if p["kind"] == "finished" else "Running"
        elif p["kind"] == "slice" and gpu_names:
            requests[gpu_names[p["pick"] % len(gpu_names)]] = str(p["count"])
        elif p["kind"] == "fraction":
            annotations = {"gpu-fraction": p["fraction"]}
        elif p["kind"] == "memory":
            annotations = {"gpu-memory": str(p["memory"])}
        elif p["kind"] == "reservation" and gpu_names:
            namespace = gpu.RESERVATION_NAMESPACE
            requests[gpu_names[0]] = "1"
        objects.append(make_pod(p["name"], namespace, node=p["node"], phase=phase, annotations=annotations,
                                containers=[{"name": "main", "requests": requests}]))
    return nodes, objects


def expected(specs, nodes, objects):
    """Per node and per pool, the figures from the objects: kube.gpu, and the console's readiness rules."""
    per_node = {}
    for spec, node in zip(specs, nodes):
        inv = gpu.node_gpus_of(node)
        per_node[spec["name"]] = {"spec": spec, "inv": inv, "ready": spec["readiness"] == "ready",
                                  "allocatable": gpu.to_decimal(inv.allocatable), "allocated": D(0)}
    for pod in objects:
        name = pod["spec"].get("nodeName")
        if name not in per_node or pod["status"]["phase"] in ("Succeeded", "Failed"):
            continue
        entry = per_node[name]
        entry["allocated"] += gpu.to_decimal(gpu.pod_gpu_demand(pod, entry["inv"]).equivalents)
    pools = {name: {"devices": 0, "total": D(0), "ready": D(0), "allocated": D(0), "apart": D(0), "free": D(0),
                    "memory": 0, "nodes": 0} for name in ("default", "mig", "shared")}
    for entry in per_node.values():
        pool, inv = pools[entry["spec"]["pool"]], entry["inv"]
        entry["free"] = max(entry["allocatable"] - entry["allocated"], D(0)) if entry["ready"] else D(0)
        pool["devices"] += inv.physical
        pool["total"] += entry["allocatable"]
        pool["memory"] += inv.total_memory_mib
        if entry["ready"]:
            pool["ready"] += entry["allocatable"]
            pool["allocated"] += entry["allocated"]
            pool["free"] += entry["free"]
            pool["nodes"] += 1
        else:
            pool["apart"] += entry["allocated"]
    return per_node, pools


def dec(text) -> Decimal:
    return D(str(text)) if text not in (None, "") else D(0)


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=fleets())
def test_every_surface_shows_the_same_ready_allocated_and_free_gpus(client, fleet, data):
    from nodepools import services as pool_services

    cluster, pools, admin = fleet
    specs, pods = data
    nodes, objects = build(specs, pods)
    pool_services.cluster_objects_replace(cluster=cluster, nodes=nodes, pods=objects)
    per_node, want = expected(specs, nodes, objects)
    client.force_login(admin)

    # The nodes: API and CSV.
    api_nodes = {n["name"]: n for n in client.get("/api/v1/nodes/", {"cluster": cluster.pk, "page_size": 100})
                 .json()["results"]}
    assert set(api_nodes) == set(per_node)
    rows = csv_of(client.get(reverse("node-list"), {"format": "csv", "columns": "all", "sort": "name"}))
    head, body = rows[0], {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}
    for name, entry in per_node.items():
        node, inv = api_nodes[name], entry["inv"]
        assert node["gpu_capacity"] == inv.physical == entry["spec"]["gpus"], name
        assert (node["status"] == "ready") == entry["ready"], (name, node["status_reasons"])
        assert dec(node["gpu_allocatable"]) == entry["allocatable"], name
        assert dec(node["gpu_ready"]) == (entry["allocatable"] if entry["ready"] else 0), name
        assert dec(node["gpu_allocated"]) == entry["allocated"], name
        assert dec(node["gpu_free"]) == entry["free"], name
        assert dec(node["gpu_allocated_not_ready"]) == (0 if entry["ready"] else entry["allocated"]), name
        assert node["gpu_memory_mib"] == inv.memory_mib, name
        assert node["gpu_sharing"]["exposure"] == inv.exposure, name
        assert {s["profile"]: s["allocatable"] for s in node["gpu_sharing"]["slices"]} == {
            s.profile: s.allocatable for s in inv.slices}, name
        row = body[name]
        assert dec(row["Ready GPU devices"]) == dec(node["gpu_ready"]), name
        assert int(row["Total GPU devices"]) == node["gpu_capacity"], name
        assert dec(row["Allocated GPUs"]) == dec(node["gpu_allocated"]), name
        assert dec(row["Free GPU devices"]) == dec(node["gpu_free"]), name
    assert "Free GPU devices" in head

    # The pools: API, CSV, pool page, overview, "Will it fit?".
    api_pools = {p["name"]: p for p in client.get("/api/v1/node-pools/", {"cluster": cluster.pk}).json()["results"]}
    rows = csv_of(client.get(reverse("pool-list"), {"format": "csv", "columns": "all", "sort": "name"}))
    csv_pools = {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}
    overview = client.get(reverse("cluster-overview", args=[cluster.pk])).content.decode()
    for name, w in want.items():
        p = api_pools[name]
        figures = (p["gpu_devices"], dec(p["gpu_total"]), dec(p["gpu_ready"]), dec(p["gpu_allocated"]),
                   dec(p["gpu_allocated_not_ready"]), dec(p["gpu_free"]), p["gpu_memory_total_mib"])
        assert figures == (w["devices"], w["total"], w["ready"], w["allocated"], w["apart"], w["free"],
                           w["memory"]), name
        c = csv_pools[name]
        assert (dec(c["Ready GPU devices"]), dec(c["Allocated GPUs"]), dec(c["Free GPUs"])) == (
            w["ready"], w["allocated"], w["free"]), name
        assert dec(c["Total GPU memory (GiB)"]) == D(str(round(w["memory"] / 1024, 1))), name
        # "Will it fit?" counts the same free GPUs on the same ready nodes.
        frag = client.get(f"/api/v1/node-pools/{pools[name].pk}/fit/").json()["fragmentation"]
        gpu_nodes = sum(1 for e in per_node.values() if e["spec"]["pool"] == name and e["ready"]
                        and e["allocatable"] > 0)
        assert (dec(frag["gpus_free"]), frag["nodes"]) == (w["free"], gpu_nodes), name
        # The pool page says it in words, the overview's row and its "Fits now" line agree.
        words = page_text(client.get(reverse("pool-detail", args=[pools[name].pk])))
        said = re.search(r"GPU devices?; ([\d.]+) total, ([\d.]+) ready, ([\d.]+) allocated, ([\d.]+) free", words)
        assert said and tuple(dec(x) for x in said.groups()) == (w["total"], w["ready"], w["allocated"], w["free"]), (
            name, words[:400])
        rows = [page_text_of(r) for r in re.findall(rf'<tr[^>]*data-pool="{name}"[^>]*>(.*?)</tr>', overview, re.S)]
        if w["nodes"]:
            free = f"{_num(w['free'])} GPU{'' if w['free'] == 1 else 's'} free"  # "1 GPU free", "0 GPUs free"
            assert any(free in r for r in rows), (name, rows)


def _num(value: Decimal) -> str:
    from ui.formats import number

    return number(value)


def page_text_of(html: str) -> str:
    from tests.pages import text

    return text(html)


def test_the_issues_mig_mixed_and_time_sliced_nodes_count_eight_gpus_each(client, fleet):
    """The issue's two nodes: 8 A100 80GB in MIG mixed `all-balanced`, 8 time-sliced × 4: 8 GPUs each,
    8 × 80 GiB of GPU memory each, and a pod of one replica holds a quarter of a GPU."""
    from nodepools import services as pool_services

    cluster, pools, admin = fleet
    mig = make_node("mig-1", gpus=8, gpu_product=A100_80, mig_config="all-balanced", labels={POOL_LABEL: "mig"})
    ts = make_node("ts-1", gpus=8, gpu_product=A100_80, gpu_replicas=4, labels={POOL_LABEL: "shared"})
    pods = operand_pods([mig, ts]) + [
        make_pod("replica", "runai-team", node="ts-1", containers=[{"name": "main", "requests": {"nvidia.com/gpu": 1}}]),
        make_pod("slice", "runai-team", node="mig-1",
                 containers=[{"name": "main", "requests": {"nvidia.com/mig-3g.40gb": 1}}]),
        make_pod("half", "runai-team", node="ts-1", annotations={"gpu-fraction": "0.5"}),
    ]
    pool_services.cluster_objects_replace(cluster=cluster, nodes=[mig, ts], pods=pods)
    client.force_login(admin)
    by_name = {n["name"]: n for n in client.get("/api/v1/nodes/").json()["results"]}
    assert (by_name["mig-1"]["gpu_capacity"], D(by_name["mig-1"]["gpu_allocatable"])) == (8, 8)
    assert (by_name["ts-1"]["gpu_capacity"], D(by_name["ts-1"]["gpu_allocatable"])) == (8, 8)
    assert D(by_name["ts-1"]["gpu_allocated"]) == D("0.75")  # one replica (1/4) and a half
    assert D(by_name["mig-1"]["gpu_allocated"]) == gpu.to_decimal(Fraction(3, 7))
    sharing = by_name["mig-1"]["gpu_sharing"]
    assert sharing["mig_config"] == "all-balanced"
    assert {s["profile"]: (s["count"], s["allocated"], s["memory_mib"]) for s in sharing["slices"]} == {
        "1g.10gb": (16, 0, 10240), "2g.20gb": (8, 0, 20480), "3g.40gb": (8, 1, 40960)}
    assert (by_name["ts-1"]["gpu_sharing"]["replicas_in_use"], by_name["ts-1"]["gpu_sharing"]["replicas_total"]) == (1, 32)
    api_pools = {p["name"]: p for p in client.get("/api/v1/node-pools/").json()["results"]}
    for name in ("mig", "shared"):
        assert api_pools[name]["gpu_devices"] == 8
        assert api_pools[name]["gpu_memory_total_mib"] == 8 * 81920  # physical memory once, not × 4
    shapes = client.get(f"/api/v1/node-pools/{pools['mig'].pk}/").json()["gpu_shapes"]
    assert shapes["exposures"] == {"mig-mixed": {"nodes": 1, "gpus": 8}} and shapes["layouts"] == ["all-balanced"]
    # How many pods of one 1g.10gb slice fit now, and the largest gang of 3g.40gb slices (one per pod).
    assert [(s["profile"], s["count"], s["allocated"], s["free"], s["most_free_on_a_node"], s["share"])
            for s in shapes["slices"]] == [
        ("1g.10gb", 16, 0, 16, 16, "0.143"), ("2g.20gb", 8, 0, 8, 8, "0.286"), ("3g.40gb", 8, 1, 7, 7, "0.429")]
    assert client.get(f"/api/v1/node-pools/{pools['shared'].pk}/").json()["gpu_shapes"]["replicas"] == [4]
    # The node page lists the slices; the pool page its GPUs and its slices.
    node_page = client.get(reverse("node-detail", args=[cluster.nodes.get(name="mig-1").pk]))
    assert "MIG, mixed strategy, layout all-balanced" in page_text(node_page)
    assert re.search(r'data-profile="3g.40gb"><td>3g.40gb</td><td><code>nvidia.com/mig-3g.40gb</code></td>'
                     r'<td class="num">8</td><td class="num">8</td><td class="num">1</td>', node_page.content.decode())
    pool_page = page_text(client.get(reverse("pool-detail", args=[pools["mig"].pk])))
    assert "8 GPU devices; 8 total, 8 ready, 0.429 allocated, 7.571 free" in pool_page
    assert "MIG slices" in pool_page and "mig-mixed: 8 GPUs on 1 node" in pool_page
    ts_page = page_text(client.get(reverse("node-detail", args=[cluster.nodes.get(name="ts-1").pk])))
    assert "time-slicing × 4 replicas: 1 of 32 in use; 1 fractional pod holding 0.5 GPUs" in ts_page


def test_a_new_layout_prices_the_pods_already_running_on_the_node_again(fleet):
    """Replicas change (the device plugin's config): the pods on the node are priced anew by the sync."""
    from nodepools import services as pool_services
    from nodepools.models import Node

    cluster, pools, admin = fleet
    pod = make_pod("replica", "runai-team", node="ts-1", containers=[{"name": "main", "requests": {"nvidia.com/gpu": 2}}])
    for replicas, held in ((4, D("0.5")), (2, D("1")), (1, D("2"))):
        node = make_node("ts-1", gpus=2, gpu_product=A100_80, gpu_replicas=replicas)
        pool_services.cluster_objects_replace(cluster=cluster, nodes=[node], pods=operand_pods([node]) + [pod])
        assert Node.objects.get(name="ts-1").usage_gpus == held, replicas
