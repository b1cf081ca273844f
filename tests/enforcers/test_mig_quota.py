"""Quotas in GPU-equivalents written as each scheduler counts MIG slices, over HTTP against the emulator.

A pool `a100` of one A100 80GB cut into seven 1g.10gb slices (the MIG manager's `all-1g.10gb`, mixed strategy):
1 GPU-equivalent, 7 slices. Project rnd-a deserves 0.429 GPU-equivalents there (3 slices of 7, as a person types
it), over-quota off. The console writes its quota into the cluster (the enforcer's reconcile through the
official client), submits workloads of 1g.10gb slices through its submission service, and the emulator's
schedulers (its Kueue, its KAI Scheduler, on a manual clock) admit them within those 3 slices and hold the one
over. A decimal quota typed in the form and read back from the API reaches the cluster as that decimal (a pool of
whole GPUs) or as the slices it means (the MIG pool)."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse
from kubernetes import client as k8s

from enforcers import services

pytestmark = pytest.mark.django_db

SLICE = "nvidia.com/mig-1g.10gb"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
KAI = ("scheduling.run.ai", "v2")
NS = "runai-rnd-a"


@pytest.fixture
def mig_lab(org, emulators, tmp_path):
    """The org's cluster on an emulator with its controllers on a manual clock; pool a100 is one MIG A100."""
    from kubesim import ManualClock, make_node
    from nodepools import services as pool_services
    from nodepools.demo_cluster import operand_pods

    emu = emulators(clock=ManualClock(), controllers=True, bookmark_interval=1.0)
    org.nodes = [
        make_node("v100-1", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384),
        make_node("a100-mig", gpus=1, gpu_product="NVIDIA-A100-SXM4-80GB", mig_config="all-1g.10gb",
                  labels={"gpu-type": "A100"}),
    ]
    org.pods = operand_pods(org.nodes)
    emu.load(org.nodes, org.pods, namespaces=["runai-rnd-a", "runai-rnd-b", "runai-ops-a"])
    # What the sync writes: the nodes as the emulator publishes them (the MIG node's slices).
    pool_services.cluster_objects_replace(cluster=org.cluster, nodes=emu.list("nodes"), pods=emu.list("pods"))
    path = emu.write_kubeconfig(tmp_path / "kubeconfig")
    pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path), kube_context="emulator")
    org.cluster.refresh_from_db()
    _quota(org.quota(org.rnd, org.a100), gpu_deserved=Decimal(1))
    _quota(org.quota(org.rnd_a, org.a100), gpu_deserved=Decimal("0.429"))
    from projects.services import project_update

    project_update(actor=None, project=org.rnd_a, allow_over_quota=False)
    org.emu = emu
    return org


def _quota(row, **values):
    from projects.services import quota_update

    row.refresh_from_db()
    quota_update(actor=None, quota=row, expected_version=row.version, **values)


def _api(cluster):
    from nodepools.sync import api_client_for

    return api_client_for(cluster)


def _reconcile(cluster):
    with _api(cluster) as api:
        return services.enforcement_reconcile(cluster=cluster, api_client=api)


def _get(cluster, group_version, plural, name):
    with _api(cluster) as api:
        return k8s.CustomObjectsApi(api).get_cluster_custom_object(*group_version, plural, name)


def _submit(org, name, slices, priority_class):
    from django.contrib.auth import get_user_model

    from workloads import submission

    admin = get_user_model().objects.filter(is_superuser=True).first() or \
        get_user_model().objects.create_superuser("mig-admin", password="x")
    request = submission.Request(project=org.rnd_a, pools=[org.a100], image="server:1", gpus=slices,
                                 gpu_profile="1g.10gb", pods=1, priority_class=priority_class, cpu="1",
                                 memory="1Gi", name=name)
    with _api(org.cluster) as api:
        submission.workload_submit(actor=admin, request=request, api_client=api)


def _admin():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(is_superuser=True).first()


def _reported(org, kind, name):
    from enforcers.models import SchedulerQueue

    return SchedulerQueue.objects.get(cluster=org.cluster, kind=kind, name=name).gpu_allocated


def _settle(emu, ticks=12):
    for _ in range(ticks):
        emu.clock.advance(1)
        emu.tick()


def _pods(emu, job):
    return [p for p in emu.list("pods", NS) if (p["metadata"].get("labels") or {}).get("job-name") == job]


def test_a_mig_pools_cluster_queue_covers_its_slices_and_kueue_admits_within_them(mig_lab):
    org, emu = mig_lab, mig_lab.emu
    services.enforcement_set(actor=None, cluster=org.cluster, enforcer="kueue")
    assert not _reconcile(org.cluster).refused
    spec = _get(org.cluster, KUEUE, "clusterqueues", "rnd-a")["spec"]
    group = spec["resourceGroups"][0]
    assert SLICE in group["coveredResources"]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    # 0.429 of the pool's 1 GPU-equivalent: 3 of its 7 slices; over-quota off: none to borrow. The pool of whole
    # GPUs has no slices: 0.
    assert flavors["a100"][SLICE] == {"name": SLICE, "nominalQuota": "3", "borrowingLimit": "0"}
    assert flavors["default"][SLICE]["nominalQuota"] == "0"

    for name, slices in (("chat", 2), ("embed", 1), ("rerank", 1)):
        _submit(org, name, slices, "inference")
        _settle(emu, 4)
    _settle(emu)
    assert [p["spec"].get("nodeName") for p in _pods(emu, "chat") + _pods(emu, "embed")] == ["a100-mig", "a100-mig"]
    assert _pods(emu, "rerank") == []  # 2 + 1 of the 3 slices are taken: its Workload waits for quota
    with _api(org.cluster) as api:
        assert k8s.BatchV1Api(api).read_namespaced_job("rerank", NS).spec.suspend is True
        workloads = k8s.CustomObjectsApi(api).list_namespaced_custom_object(*KUEUE, NS, "workloads")["items"]
    waiting = next(w for w in workloads if w["metadata"]["ownerReferences"][0]["name"] == "rerank")
    reserved = next(c for c in waiting["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert reserved["status"] == "False" and SLICE in reserved["message"]
    # What Kueue reports (3 slices used) is shown in GPU-equivalents, beside the console's own figure.
    _reconcile(org.cluster)
    assert _reported(org, "ClusterQueue", "rnd-a") == Decimal("0.429")


def test_a_mig_pools_kai_queue_counts_compute_slices_and_kai_admits_within_them(mig_lab):
    org, emu = mig_lab, mig_lab.emu
    services.enforcement_set(actor=None, cluster=org.cluster, enforcer="kai")
    assert not _reconcile(org.cluster).refused
    project = _get(org.cluster, KAI, "queues", "rnd-a.a100")["spec"]["resources"]["gpu"]
    department = _get(org.cluster, KAI, "queues", "department.rnd.a100")["spec"]["resources"]["gpu"]
    assert (project["quota"], project["limit"]) == (3, 3)  # slices, as KAI counts a 1g.10gb (over-quota off)
    assert department["quota"] == 7

    # Over-quota off: the limit is the deserved quota, 3 slices; 2 + 1 slices run, the fourth slice waits.
    for name, slices in (("chat", 2), ("embed", 1), ("rerank", 1)):
        _submit(org, name, slices, "inference")
        _settle(emu, 4)
    _settle(emu)
    assert [p["spec"].get("nodeName") for p in _pods(emu, "chat") + _pods(emu, "embed")] == ["a100-mig", "a100-mig"]
    [held] = _pods(emu, "rerank")
    assert not held["spec"].get("nodeName")
    group = emu.get("podgroups.scheduling.run.ai", held["metadata"]["annotations"]["pod-group-name"], NS)
    reasons = {r.get("reason"): r.get("message") for c in group["status"].get("schedulingConditions") or []
               for r in c.get("reasons") or []}
    assert "OverLimit" in reasons, group["status"]
    # KAI's own words count slices: 3 taken, 1 asked (in GPU-equivalents the quota would have been 0.429).
    assert "currently 3 GPUs allocated and workload requested 1 GPUs" in reasons["OverLimit"], reasons
    # KAI's queue status (3 slices allocated) comes back in GPU-equivalents and agrees with the console's.
    _reconcile(org.cluster)
    assert _reported(org, "Queue", "rnd-a.a100") == Decimal("0.429")
    from nodepools import services as pool_services
    from enforcers.selectors import queue_status_rows

    pool_services.cluster_objects_replace(cluster=org.cluster, nodes=emu.list("nodes"), pods=emu.list("pods"))
    row = next(r for r in queue_status_rows(user=_admin(), cluster=org.cluster) if r.queue.name == "rnd-a.a100")
    assert (row.console_allocated, row.differs) == (Decimal("0.429"), False)


def test_a_decimal_quota_goes_from_the_form_through_the_api_into_the_cluster(mig_lab, client, users, api):
    org = mig_lab
    services.enforcement_set(actor=None, cluster=org.cluster, enforcer="kai")
    quota = org.quota(org.rnd_b, org.a100)
    client.force_login(users["sysadmin"])
    response = client.post(reverse("quota-edit", args=[quota.pk]), {
        "gpu_deserved": "0.286", "gpu_limit": "0.714", "over_quota_weight": "2", "rank": "3",
        "version": str(quota.version)})
    assert "Saved: 0.286 deserved GPUs." in response.content.decode()
    entries = api(users["sysadmin"]).get(f"/api/v1/projects/{org.rnd_b.pk}/quotas/").json()["quotas"]
    assert next((e["gpu_deserved"], e["gpu_limit"]) for e in entries if e["pool"] == org.a100.pk) == ("0.286", "0.714")
    # Through the API on the pool of whole GPUs: a quarter of a GPU.
    client_api = api(users["sysadmin"])
    etag = client_api.get(f"/api/v1/projects/{org.rnd_b.pk}/quotas/")["ETag"]
    put = client_api.put(f"/api/v1/projects/{org.rnd_b.pk}/quotas/", {"quotas": [
        {"pool": org.default.pk, "gpu_deserved": "0.25"}]}, format="json", HTTP_IF_MATCH=etag)
    assert put.status_code == 200, put.content
    assert not _reconcile(org.cluster).refused
    mig = _get(org.cluster, KAI, "queues", "rnd-b.a100")["spec"]["resources"]["gpu"]
    whole = _get(org.cluster, KAI, "queues", "rnd-b.default")["spec"]["resources"]["gpu"]
    assert (mig["quota"], mig["limit"]) == (2, 5)  # 2 and 5 of the A100's 7 slices
    assert whole["quota"] == 0.25  # KAI's quota is a float: the GPU-equivalents as they are
