"""A submission over the API creates the Job in the emulator (over HTTP, through the official client);
the sync mirrors it into the workloads table (page, API, CSV), with the pool its pods were placed in;
a researcher stops it. Nothing is patched: the console talks to the emulator as to a cluster."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from tests.pages import csv_of
from kubesim import make_pod
from nodepools.sync import ClusterSync, SyncOptions
from workloads import render
from workloads.models import Workload

pytestmark = pytest.mark.django_db(transaction=True)

FAST = dict(backoff_base=0.05, backoff_max=0.3, read_timeout=5, unreachable_after=0.4, batch_delay=0.02,
            tick=0.05, lock_poll=0.3, watch_timeout_min=30, watch_timeout_max=40, hint_interval=0.05)


@pytest.fixture
def syncing(lab):
    sync = ClusterSync(lab.cluster, SyncOptions(**FAST))
    sync.start()
    yield sync
    sync.stop()


def submit(api, user, project, **extra):
    body = {"project": project.pk, "pools": ["a100", "default"], "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": "python train.py --epochs 3", "gpus": 2, "cpu": "4", "memory": "16Gi",
            "priority_class": "train", "pods": 1, "name": "train-1"}
    body.update(extra)
    return api(user).post("/api/v1/workloads/", body, format="json")


def test_submission_is_created_in_the_cluster_mirrored_and_listed(lab, users, api, sim, syncing, client):
    # Dry run first: the Job, nothing created.
    response = submit(api, users["researcher"], lab.rnd_a, dry_run=True)
    assert response.status_code == 200, response.content
    assert response.json()["job"]["metadata"]["name"] == "train-1"
    assert response.json()["job"]["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    assert response.json()["queued_in"] == "" and len(response.json()["scheduling"]) == 1
    assert sim.list("jobs.batch") == []

    response = submit(api, users["researcher"], lab.rnd_a)
    assert response.status_code == 201, response.content
    assert response.json()["namespace"] == "runai-rnd-a"
    jobs = sim.list("jobs.batch", "runai-rnd-a")
    assert [j["metadata"]["name"] for j in jobs] == ["train-1"]
    created = jobs[0]
    assert created["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "train.py", "--epochs", "3"]
    # The cluster records the console as the writer.
    assert {m.get("manager") for m in created["metadata"].get("managedFields") or []} <= {"gpu-capacity-console"}
    event = AuditEvent.objects.get(object_type="workload", action=AuditEvent.Action.CREATE)
    assert event.object_id == "runai-rnd-a/train-1" and event.actor == users["researcher"]
    assert event.after["pools"] == ["a100", "default"]

    # The sync mirrors the Job; the table shows it, pending, with the pools tried.
    assert syncing.run_until(lambda: Workload.objects.filter(name="train-1").exists())
    row = Workload.objects.get(name="train-1")
    assert row.pools_tried == ["a100", "default"] and row.priority_class == "train" and row.priority == 50
    assert row.gpus == 2 and row.namespace == "runai-rnd-a"
    listed = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert [(w["name"], w["project"], w["phase"], w["pools_tried"], w["preemptible"]) for w in listed] == [
        ("train-1", "rnd-a", "Pending", ["a100", "default"], True)]

    # Its pod is bound to an a100 node and runs: placed in a100, Running.
    sim.add_pod(make_pod("train-1-abcde", "runai-rnd-a", node="a100-1", phase="Running", priority=50,
                         labels={render.JOB_NAME_LABEL: "train-1", "job-name": "train-1"},
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": "2"}}]))
    assert syncing.run_until(lambda: selectors_row("train-1").placed_pool == "a100")
    client.force_login(users["researcher"])
    page = client.get(reverse("workload-list")).content.decode()
    assert 'data-workload="train-1"' in page
    row_html = page.split('data-workload="train-1"', 1)[1].split("</tr>", 1)[0]
    for text in ("rnd-a", "a100 → default", "Running"):
        assert text in row_html, text
    # Its priority class and whether it is preemptible are columns to choose (the default ones fit the window);
    # the CSV holds every column.
    assert ">train<" not in row_html
    full = csv_of(client.get(reverse("workload-list"), {"format": "csv", "columns": "all"}))
    assert full[1][full[0].index("Priority class")] == "train"
    assert full[1][full[0].index("Preemptible")] in ("True", "yes")
    # Per pool and per project filters (the project page links to its own); the CSV holds the same row.
    assert 'data-workload="train-1"' in client.get(reverse("workload-list"), {"pool": lab.a100.pk}).content.decode()
    project_page = client.get(reverse("project-detail", args=[lab.rnd_a.pk])).content.decode()
    link = re.search(r'<a href="([^"]+)" id="project-workloads">', project_page).group(1).replace("&amp;", "&")
    assert 'data-workload="train-1"' in client.get(link).content.decode()
    assert 'data-workload="train-1"' not in client.get(
        reverse("workload-list"), {"project": lab.rnd_b.pk}).content.decode()
    rows = csv_of(client.get(reverse("workload-list"), {"format": "csv"}))
    assert rows[0][:5] == ["Workload", "Project", "Pools tried", "Placed in", "Phase"]
    assert rows[1][:5] == ["train-1", "rnd-a", "a100 → default", "a100", "Running"]
    assert full[1][full[0].index("Platform")] == ""


def selectors_row(name):
    from workloads import selectors

    return selectors.workload_list(user=_admin()).get(name=name)


def _admin():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="sysadmin")


def test_a_researcher_stops_their_workload_and_a_viewer_cannot(lab, users, api, sim, syncing):
    assert submit(api, users["researcher"], lab.rnd_a).status_code == 201
    assert syncing.run_until(lambda: Workload.objects.filter(name="train-1").exists())
    row = Workload.objects.get(name="train-1")
    # A viewer of the cluster sees it but may not stop it.
    assert api(users["cluster_viewer"]).get(f"/api/v1/workloads/{row.pk}/").status_code == 200
    assert api(users["cluster_viewer"]).delete(f"/api/v1/workloads/{row.pk}/").status_code == 403
    assert len(sim.list("jobs.batch", "runai-rnd-a")) == 1
    # The researcher stops it: the Job is deleted in the cluster, the mirror follows, it is audited.
    assert api(users["researcher"]).delete(f"/api/v1/workloads/{row.pk}/").status_code == 204
    assert sim.list("jobs.batch", "runai-rnd-a") == []
    # The workload stays, Stopped, listed with its phase and read by id with its timeline saying who stopped it.
    assert syncing.run_until(lambda: Workload.objects.filter(name="train-1", phase="Stopped",
                                                             gone_at__isnull=False).exists())
    assert Workload.objects.get(name="train-1").pk == row.pk
    listed = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert [(w["name"], w["phase"]) for w in listed] == [("train-1", "Stopped")]
    one = api(users["cluster_viewer"]).get(f"/api/v1/workloads/{row.pk}/").json()
    assert one["phase"] == "Stopped" and one["gone_at"]
    whats = [e["what"] for e in one["timeline"]]
    assert whats[0] == "Submitted by researcher" and "Stopped by researcher" in whats, whats
    assert whats[-1].startswith("Its Job left the cluster"), whats
    event = AuditEvent.objects.get(object_type="workload", action=AuditEvent.Action.DELETE)
    assert event.actor == users["researcher"] and event.object_id == "runai-rnd-a/train-1"
    # Stopped once is stopped: stopping it again is refused in words, the cluster is not asked.
    again = api(users["researcher"]).delete(f"/api/v1/workloads/{row.pk}/")
    assert again.status_code == 400 and "already ended (Stopped)" in again.content.decode()


def test_the_stop_button_stops_it_from_the_page(lab, users, api, sim, syncing, client):
    assert submit(api, users["researcher"], lab.rnd_a).status_code == 201
    assert syncing.run_until(lambda: Workload.objects.filter(name="train-1").exists())
    client.force_login(users["researcher"])
    page = client.get(reverse("workload-list")).content.decode()
    row = Workload.objects.get(name="train-1")
    assert reverse("workload-stop", args=[row.pk]) in page and 'aria-label="Stop train-1">Stop</a>' in page
    # Stop asks first (its own page without scripts), naming the pods, the GPUs and the project; nothing stops.
    asked = client.get(reverse("workload-stop", args=[row.pk])).content.decode()
    assert "Stop workload train-1?" in asked and "project <strong>rnd-a</strong>" in asked
    assert "2 GPUs it asks for" in asked and "Stop train-1</button>" in asked
    assert len(sim.list("jobs.batch", "runai-rnd-a")) == 1
    response = client.post(reverse("workload-stop", args=[row.pk]), follow=True)
    assert "is being stopped" in response.content.decode()
    assert sim.list("jobs.batch", "runai-rnd-a") == []
    # It keeps its page, Stopped, with its timeline.
    assert syncing.run_until(lambda: Workload.objects.filter(pk=row.pk, phase="Stopped").exists())
    detail = client.get(reverse("workload-detail", args=[row.pk]))
    assert detail.status_code == 200
    html = detail.content.decode()
    assert '<dd id="workload-phase">Stopped</dd>' in html and "Stopped by researcher" in html
    assert 'aria-label="Stop train-1"' not in html


def test_a_name_taken_in_the_cluster_is_refused_naming_the_field(lab, users, api, sim):
    assert submit(api, users["researcher"], lab.rnd_a).status_code == 201
    response = submit(api, users["researcher"], lab.rnd_a)
    assert response.status_code == 400
    assert response.json()["errors"]["name"] == [
        "A workload named train-1 already exists in runai-rnd-a: choose another name."]
    assert len(sim.list("jobs.batch")) == 1


def test_with_kueue_the_job_waits_suspended_and_the_table_says_for_what(lab, users, api, sim, syncing):
    from enforcers.services import enforcement_set

    enforcement_set(actor=None, cluster=lab.cluster, enforcer="kueue")
    assert submit(api, users["researcher"], lab.rnd_a).status_code == 201
    [job] = sim.list("jobs.batch", "runai-rnd-a")
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "rnd-a"
    assert syncing.run_until(lambda: Workload.objects.filter(name="train-1").exists())
    [row] = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert row["phase"] == "Suspended" and row["queue"] == "rnd-a"
    # No Kueue runs in this cluster: no Workload says why, so the console says what it waits for, then its
    # own reading of the quotas and nodes.
    assert row["pending_reason"] == ("Waiting for Kueue to admit it (queue rnd-a). Why is it waiting? It fits in "
                                     "a100 now and waits for the scheduler's next round.")
    assert row["scheduler_reason"] is None and row["why_waiting"]["code"] == "schedulable"
    # The Job fails: the table says so, with the cluster's words.
    sim.update("jobs.batch", "train-1", lambda o: o.setdefault("status", {}).update(conditions=[{
        "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit"}]), namespace="runai-rnd-a",
        subresource="status")
    assert syncing.run_until(lambda: Workload.objects.get(name="train-1").phase == "Failed")
    [row] = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert row["phase"] == "Failed" and row["pending_reason"] == ""
    assert Workload.objects.get(name="train-1").status_message == "Job has reached the specified backoff limit"


# The console's own reading of the same pod (the a100 nodes are free in the mirror), after the scheduler's words.
CONSOLE_SAYS = "It fits in a100 now and waits for the scheduler's next round."
SCHEDULER_SAYS = ("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
                  "affinity/selector. preemption: 0/4 nodes are available: 2 No preemption victims found for "
                  "incoming pod, 2 Preemption is not helpful for scheduling.")


def test_a_pending_workload_shows_the_schedulers_words_from_its_pods(lab, users, api, sim, syncing, client):
    assert submit(api, users["researcher"], lab.rnd_a, gpus=4).status_code == 201
    assert syncing.run_until(lambda: Workload.objects.filter(name="train-1").exists())
    # The Job's pod, which the scheduler could not place: PodScheduled=False with its message.
    sim.add_pod(make_pod("train-1-xyz12", "runai-rnd-a", phase="Pending", priority=50,
                         scheduling_message=SCHEDULER_SAYS,
                         labels={render.JOB_NAME_LABEL: "train-1", "job-name": "train-1"},
                         containers=[{"name": "main", "requests": {"nvidia.com/gpu": "4"}}]))
    from nodepools.models import Pod

    assert syncing.run_until(lambda: Pod.objects.filter(name="train-1-xyz12", scheduling_message=SCHEDULER_SAYS).exists())
    # The console has its own reading of the pending pod too; the scheduler's words come first.
    from projects.waiting import waiting_requests

    assert any(w.name == "train-1-xyz12" and w.reason.text for w in
               waiting_requests(user=users["researcher"], project=lab.rnd_a))
    [row] = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert (row["phase"], row["pending_reason"]) == ("Pending", f"{SCHEDULER_SAYS} Why is it waiting? {CONSOLE_SAYS}")
    assert row["scheduler_reason"] == {"scheduler": "default-scheduler", "reason": "Unschedulable",
                                       "category": "capacity", "message": SCHEDULER_SAYS,
                                       "source": "Pod: PodScheduled=False"}
    assert row["why_waiting"]["category"] == "schedulable" and row["waiting_category"] == "capacity"
    client.force_login(users["researcher"])
    page = client.get(reverse("workload-list")).content.decode()
    row_html = page.split('data-workload="train-1"', 1)[1].split("</tr>", 1)[0]
    assert "0/4 nodes are available: 2 Insufficient nvidia.com/gpu" in row_html
    rows = csv_of(client.get(reverse("workload-list"), {"format": "csv"}))
    assert rows[1][rows[0].index("Pending reason")] == f"{SCHEDULER_SAYS} Why is it waiting? {CONSOLE_SAYS}"
    # The scheduler places it: PodScheduled turns True, it runs, and no reason is left.
    def place(pod):
        pod["spec"]["nodeName"] = "a100-1"
        pod["status"].update(phase="Running", conditions=[{"type": "PodScheduled", "status": "True"}])

    sim.update_pod("runai-rnd-a", "train-1-xyz12", place)
    assert syncing.run_until(lambda: selectors_row("train-1").running_pods == 1)
    [row] = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert (row["phase"], row["pending_reason"]) == ("Running", "")


def test_a_mig_submission_is_mirrored_with_its_slices_and_its_estimate_counts_them(lab, users, api, sim, syncing):
    """Issue 30, point 6: a Job asking MIG slices, created in the emulator, is mirrored with what one pod asks
    (the sync reads it from the Job over HTTP); its start estimate judges the pool's nodes in slices."""
    from kubesim import make_node
    from nodepools import services as pool_services
    from nodepools.demo_cluster import operand_pods
    from nodepools.models import Node, NodeStatus

    pool_services.pool_create(actor=None, cluster=lab.cluster, name="a100-mig", label_key="gpu-type",
                              label_value="A100-MIG")
    node = make_node("mig-1", gpus=2, gpu_product="NVIDIA-A100-SXM4-80GB", mig_config="all-3g.40gb",
                     labels={"gpu-type": "A100-MIG"})
    sim.add_node(node)
    for pod in operand_pods([node]):
        sim.add_pod(pod)
    # Three of its four 3g.40gb slices are held by a pod of rnd-b.
    sim.add_pod(make_pod("b-slices", "runai-rnd-b", node="mig-1", phase="Running", priority=50,
                         containers=[{"name": "main", "requests": {"nvidia.com/mig-3g.40gb": "3"}}]))
    assert syncing.run_until(lambda: Node.objects.filter(name="mig-1", status=NodeStatus.READY).exists()
                             and Node.objects.get(name="mig-1").usage_gpus > 0)
    dry = submit(api, users["researcher"], lab.rnd_a, pools=["a100-mig"], gpus=2, gpu_profile="3g.40gb",
                 name="slices-1", dry_run=True)
    assert dry.status_code == 200, dry.content
    verdict = dry.json()["verdict"]
    assert verdict["verdict"] == "waits_for_capacity"
    assert "1 3g.40gb slice is free on 1 Ready node that publishes them" in verdict["headline"]
    response = submit(api, users["researcher"], lab.rnd_a, pools=["a100-mig"], gpus=2, gpu_profile="3g.40gb",
                      name="slices-1")
    assert response.status_code == 201, response.content
    assert syncing.run_until(lambda: Workload.objects.filter(name="slices-1").exists())
    row = Workload.objects.get(name="slices-1")
    assert row.gpu_request == {"kind": "mig", "resources": {"nvidia.com/mig-3g.40gb": 2}}
    assert str(row.gpus) == "0.857"  # 2 × 3/7 of a GPU
    listed = {w["name"]: w for w in api(users["researcher"]).get("/api/v1/workloads/").json()["results"]}
    # rnd-b's pod has no deadline and no history: no estimate, and it names whose slices it waits for.
    assert listed["slices-1"]["start_estimate"]["text"].startswith("no estimate: it needs GPUs that rnd-b's")
