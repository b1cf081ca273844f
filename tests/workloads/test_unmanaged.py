"""Every GPU user is a workload (issue point 4): the pods and Jobs the console did not submit — a bare pod, a
Deployment's ReplicaSet's pods, another controller's Job — are rows of the workloads list, its CSV and the API,
marked as such (kind, owner, scheduler); a project's workloads add up to its allocated GPUs; a researcher sees
only its projects' ones, and nobody gets a Stop for what the console cannot stop."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from tests.pages import csv_of
from workloads.models import Workload

OWNED_BY = "ownerReferences"


def _owned(pod: dict, kind: str, name: str) -> dict:
    pod["metadata"][OWNED_BY] = [{"apiVersion": "apps/v1" if kind != "Job" else "batch/v1", "kind": kind,
                                  "name": name, "uid": f"uid-{name}", "controller": True}]
    return pod


def _gpu_pod(name, namespace, node, gpus, **kw):
    from kubesim import make_pod

    return make_pod(name, namespace, node=node, priority=50, priority_class="train",
                    containers=[{"name": "main", "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}], **kw)


@pytest.fixture
def foreign(org):
    """rnd-a: a bare notebook (2 GPUs, kube-scheduler), two pods of a Deployment's ReplicaSet (1 GPU each) and a
    CronJob's Job (1 GPU); ops-a: a bare pod; a KAI reservation pod (nobody's workload); a pending bare pod."""
    from workloads.sync import jobs_mirror

    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "etl", "namespace": "runai-rnd-a", "uid": "uid-etl", OWNED_BY: [
               {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "uid-n", "controller": True}]},
           "spec": {"parallelism": 1, "template": {"spec": {"containers": [
               {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}},
           "status": {"startTime": "2026-12-01T10:00:00Z", "active": 1}}
    jobs_mirror(cluster=org.cluster, jobs=[job])
    org.pods += [
        _gpu_pod("notebook-x", "runai-rnd-a", "a100-1", 2),
        _owned(_gpu_pod("serve-abc-1", "runai-rnd-a", "v100-1", 1), "ReplicaSet", "serve-abc"),
        _owned(_gpu_pod("serve-abc-2", "runai-rnd-a", "v100-2", 1), "ReplicaSet", "serve-abc"),
        _owned(_gpu_pod("etl-7k2p", "runai-rnd-a", "a100-2", 1, labels={"batch.kubernetes.io/job-name": "etl"}),
               "Job", "etl"),
        _gpu_pod("ops-debug", "runai-ops-a", "a100-2", 1),
        _gpu_pod("big-wait", "runai-rnd-a", None, 8, phase="Pending"),
        _gpu_pod("gpu-reservation-x", "kai-resource-reservation", "a100-2", 1),
    ]
    org.load()
    return org


def _rows(api, user, **params) -> dict[str, dict]:
    answer = api(user).get("/api/v1/workloads/", {"page_size": 200, **params})
    assert answer.status_code == 200, answer.content
    return {row["name"]: row for row in answer.json()["results"]}


@pytest.mark.django_db
def test_pods_and_jobs_the_console_did_not_submit_are_workloads_marked_as_such(foreign, users, api, client):
    rows = _rows(api, users["sysadmin"])
    assert "gpu-reservation-x" not in rows and not any(n.startswith("nvidia-") for n in rows)
    bare = rows["notebook-x"]
    assert (bare["kind"], bare["owner"], bare["by_console"], bare["scheduler_name"]) == (
        "Pod", "", False, "default-scheduler")
    assert bare["origin"] == "not submitted by the console: a bare pod (no owner), scheduler default-scheduler"
    assert (bare["phase"], bare["project"], Decimal(bare["gpus_held"])) == ("Running", "rnd-a", Decimal(2))
    served = rows["serve-abc"]  # its pods together, named after their controller
    assert (served["kind"], served["owner"], served["pods"], Decimal(served["gpus_held"])) == (
        "ReplicaSet", "ReplicaSet/serve-abc", 2, Decimal(2))
    assert served["origin"] == "not submitted by the console: pods of ReplicaSet serve-abc, scheduler default-scheduler"
    etl = rows["etl"]
    assert (etl["kind"], etl["owner"], etl["by_console"], Decimal(etl["gpus_held"])) == (
        "Job", "CronJob/nightly", False, Decimal(1))
    assert "serve-abc-1" not in rows and "etl-7k2p" not in rows  # a controller's pods are its row's
    waiting = rows["big-wait"]
    assert waiting["phase"] == "Pending" and waiting["pending_reason"].startswith("Never fits: no node of default has 8 GPUs")
    # Only these: the console's own submissions are filtered apart.
    assert set(_rows(api, users["sysadmin"], origin="other")) == {"notebook-x", "serve-abc", "etl", "ops-debug",
                                                                 "big-wait"}
    assert set(_rows(api, users["sysadmin"], origin="console")) == set()
    assert set(_rows(api, users["sysadmin"], kind="ReplicaSet")) == {"serve-abc"}

    # The list says so in the row, and the CSV carries kind, owner, scheduler and who made it.
    client.force_login(users["sysadmin"])
    page = client.get(reverse("workload-list")).content.decode()
    row = page.split('data-workload="notebook-x"', 1)[1].split("</tr>", 1)[0]
    assert "bare pod · not submitted by the console" in row and ">Stop<" not in row
    from tests.workloads.test_scheduler_decisions import choose_columns

    choose_columns(users["sysadmin"], "name", "kind", "owner", "scheduler", "origin", "gpus_held")
    table = csv_of(client.get(reverse("workload-list"), {"format": "csv"}))
    assert table[0] == ["Workload", "Kind", "Owner", "Scheduler", "Made by", "GPUs held"]
    by_name = {r[0]: r for r in table[1:]}
    assert by_name["serve-abc"][:4] == ["serve-abc", "ReplicaSet", "ReplicaSet/serve-abc", "default-scheduler"]
    assert by_name["etl"][1:3] == ["Job", "CronJob/nightly"]
    assert by_name["notebook-x"][4] == bare["origin"]


@pytest.mark.django_db
def test_a_projects_workloads_add_up_to_its_allocated_gpus(foreign, users, api, client):
    from projects.selectors import project_summary

    summary = project_summary(user=users["sysadmin"], project=foreign.rnd_a)
    allocated = sum((Decimal(line.allocated or 0) for _, line in summary), Decimal(0))
    rows = _rows(api, users["sysadmin"], project=foreign.rnd_a.pk)
    held = sum((Decimal(r["gpus_held"]) for r in rows.values() if r["phase"] == "Running"), Decimal(0))
    assert allocated == held == Decimal(5), (allocated, {n: r["gpus_held"] for n, r in rows.items()})
    client.force_login(users["sysadmin"])
    page = client.get(reverse("project-detail", args=[foreign.rnd_a.pk])).content.decode()
    assert "5 GPUs allocated, held by its running workloads" in page


@pytest.mark.django_db
def test_a_researcher_sees_only_its_projects_unmanaged_pods_and_cannot_stop_them(foreign, users, api, client):
    rows = _rows(api, users["researcher"])  # researcher of rnd-a
    assert {"notebook-x", "serve-abc", "etl"} <= set(rows) and "ops-debug" not in rows
    notebook = Workload.objects.get(name="notebook-x")
    client.force_login(users["researcher"])
    assert client.get(reverse("workload-stop", args=[notebook.pk])).status_code == 403
    answer = api(users["researcher"]).delete(f"/api/v1/workloads/{notebook.pk}/")
    assert answer.status_code == 403 and "the console stops only Jobs" in answer.content.decode()
    assert client.get(reverse("workload-detail", args=[Workload.objects.get(name="ops-debug").pk])).status_code == 404
    detail = client.get(reverse("workload-detail", args=[notebook.pk])).content.decode()
    assert ("Pod · not submitted by the console: a bare pod (no owner), scheduler default-scheduler" in detail
            and "notebook-x" in detail and ">Stop<" not in detail)
    assert '<dd id="workload-gpus-held">2 GPUs held now</dd>' in detail


@pytest.mark.django_db
def test_a_bare_pod_gone_from_the_cluster_keeps_its_row_stopped(foreign, users, api):
    foreign.pods = [p for p in foreign.pods if p["metadata"]["name"] != "notebook-x"]
    foreign.load()
    row = Workload.objects.get(name="notebook-x")
    assert row.gone_at is not None and row.phase == "Stopped"
    assert _rows(api, users["sysadmin"])["notebook-x"]["phase"] == "Stopped"


@pytest.mark.django_db(transaction=True)
def test_the_sync_reads_owner_and_scheduler_and_keeps_the_rows_of_pods_no_job_owns(lab, sim, users, api):
    """Over HTTP from the emulator: the mirrored Pod keeps its controller (ownerReferences) and spec.schedulerName;
    the pods of a StatefulSet become one row, a bare pod KAI placed its own; a pod deleted in the cluster leaves
    its row Stopped (the watch's delete), the other pod's row counts one pod less."""
    from nodepools.models import Pod
    from nodepools.sync import ClusterSync, SyncOptions
    from tests.workloads.test_submit_emulator import FAST

    kai = _gpu_pod("kai-notebook", "runai-rnd-a", "a100-1", 1)
    kai["spec"]["schedulerName"] = "kai-scheduler"
    for pod in (kai, _owned(_gpu_pod("db-0", "runai-rnd-a", "a100-2", 1), "StatefulSet", "db"),
                _owned(_gpu_pod("db-1", "runai-rnd-a", "a100-2", 1), "StatefulSet", "db")):
        sim.add_pod(pod)
    sync = ClusterSync(lab.cluster, SyncOptions(**FAST))
    sync.start()
    try:
        assert sync.run_until(lambda: Workload.objects.filter(name__in=("kai-notebook", "db")).count() == 2, 20)
        pod = Pod.objects.get(name="db-1")
        assert (pod.owner_kind, pod.owner_name, pod.scheduler_name, pod.workload_name) == (
            "StatefulSet", "db", "default-scheduler", "db")
        assert Pod.objects.get(name="kai-notebook").scheduler_name == "kai-scheduler"
        rows = _rows(api, users["researcher"])
        assert (rows["db"]["kind"], rows["db"]["pods"], rows["db"]["owner"]) == ("StatefulSet", 2, "StatefulSet/db")
        assert (rows["kai-notebook"]["kind"], rows["kai-notebook"]["scheduler_name"]) == ("Pod", "kai-scheduler")
        sim.delete_pod("runai-rnd-a", "kai-notebook")
        sim.delete_pod("runai-rnd-a", "db-0")
        assert sync.run_until(lambda: Workload.objects.filter(name="kai-notebook", phase="Stopped").exists()
                              and Workload.objects.filter(name="db", pods=1).exists(), 20)
        assert Workload.objects.get(name="kai-notebook").gone_at is not None
    finally:
        sync.stop()
