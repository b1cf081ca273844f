"""A workload's history: the sync notes what it sees become of a Job (submitted by whom, admitted, started,
preempted by whom, ran again, left the cluster), the console notes who stopped it; a Job gone keeps its row (phase
Stopped unless it had finished), its page and its timeline, in the table (hidden by default once ended an hour
ago), the page and the API. Stopping is for those whose role allows it, and asks first."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from nodepools.sync.mirror import Mirror
from workloads import render, selectors, services
from workloads.models import Workload, WorkloadEvent, WorkloadEventKind
from workloads.sync import JOBS, KUEUE_WORKLOADS

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) - timedelta(minutes=30)


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name="train-1", namespace="runai-rnd-a", uid="job-uid-1", rv="1", started=None, by="alice"):
    status = {"startTime": started} if started else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": rv,
                         "creationTimestamp": at(0),
                         "annotations": {render.SUBMITTED_BY_ANNOTATION: by, render.POOLS_ANNOTATION: "a100"}},
            "spec": {"parallelism": 1, "template": {"spec": {"priorityClassName": "train", "restartPolicy": "Never",
                                                             "containers": [
                {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}},
            "status": status}


def kueue(job_name="train-1", job_uid="job-uid-1", rv="1", admitted_at=None, evicted_at=None, by_job_uid=""):
    conditions = []
    if admitted_at:
        conditions += [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": admitted_at},
                       {"type": "Admitted", "status": "True", "lastTransitionTime": admitted_at}]
    if evicted_at:
        conditions.append({"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": evicted_at,
                           "message": f"Preempted to accommodate a workload (UID: wl-9, JobUID: {by_job_uid}) due to "
                                      "prioritization in the ClusterQueue"})
    return {"metadata": {"name": f"job-{job_name}-abcde", "namespace": "runai-rnd-a", "uid": f"kw-{job_uid}",
                         "resourceVersion": rv, "creationTimestamp": at(0),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name,
                                              "uid": job_uid}]},
            "spec": {"queueName": "rnd-a"},
            "status": {"admission": {"clusterQueue": "a100-cq"} if admitted_at else {}, "conditions": conditions}}


def sync(cluster, *steps):
    """What the sync does with these (kind, "apply"/"delete", object) events, in one batch each."""
    mirror = Mirror(cluster, resources=[JOBS, KUEUE_WORKLOADS])
    for kind, what, obj in steps:
        getattr(mirror, what)(kind, obj)
        mirror.flush()
    return mirror


def whats(workload, user):
    return [entry.what for entry in selectors.workload_timeline(workload, user=user)]


def test_the_sync_notes_submitted_admitted_started_preempted_ran_again_and_gone(org, users):
    cluster = org.cluster
    # The preemptor: a Job of rnd-b (the researcher of rnd-a may not see it, only its project).
    sync(cluster, (JOBS, "apply", job("serve-1", "runai-rnd-b", uid="serve-uid", by="bob")))
    sync(cluster,
         (JOBS, "apply", job()),
         (KUEUE_WORKLOADS, "apply", kueue(admitted_at=at(1))),
         (JOBS, "apply", job(rv="2", started=at(2))),
         (KUEUE_WORKLOADS, "apply", kueue(rv="2", admitted_at=at(1), evicted_at=at(10), by_job_uid="serve-uid")),
         (JOBS, "apply", job(rv="3", started=at(15))),
         # Noted again (a relist, a watch resumed): nothing is noted twice.
         (JOBS, "apply", job(rv="4", started=at(15))))
    workload = selectors.workload_list(user=users["sysadmin"]).get(name="train-1")
    assert whats(workload, users["sysadmin"]) == [
        "Submitted by alice", "Admitted to ClusterQueue a100-cq", "Started", "Preempted by runai-rnd-b/serve-1",
        "Ran again"]
    [preempted] = [e for e in selectors.workload_timeline(workload, user=users["sysadmin"]) if e.kind == "preempted"]
    assert preempted.by_id == Workload.objects.get(name="serve-1").pk and "prioritization" in preempted.detail
    # Whoever may not see the preemptor is told its project only.
    assert "Preempted by a workload of project rnd-b" in whats(workload, users["researcher"])

    # The Job is deleted in the cluster (by someone outside the console): the row stays, Stopped.
    sync(cluster, (JOBS, "delete", job(rv="5", started=at(15))))
    workload = selectors.workload_list(user=users["researcher"]).get(name="train-1")
    assert (workload.phase, selectors.display_phase(workload)) == ("Stopped", "Stopped")
    assert workload.gone_at is not None
    assert whats(workload, users["researcher"])[-1] == "Its Job left the cluster (deleted before it finished: Stopped)"
    gone_at = workload.gone_at
    # The next sync (a new mirror, a full list without it) neither deletes it nor marks it again.
    mirror = Mirror(cluster, resources=[JOBS])
    assert mirror.sweep(JOBS, {("runai-rnd-b", "serve-1")}) == 0
    mirror.flush()
    assert Workload.objects.get(name="train-1").gone_at == gone_at
    assert WorkloadEvent.objects.filter(name="train-1", kind=WorkloadEventKind.GONE).count() == 1


def test_a_finished_job_removed_keeps_its_phase_and_a_job_of_the_same_name_starts_a_new_timeline(org, users):
    done = job(rv="2", started=at(1))
    done["status"].update(completionTime=at(20), conditions=[{"type": "Complete", "status": "True",
                                                              "lastTransitionTime": at(20)}])
    sync(org.cluster, (JOBS, "apply", done), (JOBS, "delete", done))
    workload = Workload.objects.get(name="train-1")
    assert workload.phase == "Succeeded" and workload.gone_at is not None
    assert whats(workload, users["sysadmin"]) == ["Submitted by alice", "Started", "Finished", "Its Job left the cluster"]
    # Submitted again under the same name: the same row comes back to life, with the new Job's timeline only.
    sync(org.cluster, (JOBS, "apply", job(uid="job-uid-2", by="carol")))
    workload = Workload.objects.get(name="train-1")
    assert (workload.uid, workload.phase, workload.gone_at) == ("job-uid-2", "Pending", None)
    assert whats(workload, users["sysadmin"]) == ["Submitted by carol"]


@pytest.fixture
def stoppable(lab, sim):
    """train-1 of rnd-a running in the emulator (over HTTP) and mirrored as the sync would."""
    obj = job(started=at(1))
    sim.create("jobs.batch", obj)
    created = sim.get("jobs.batch", "train-1", "runai-rnd-a")
    sync(lab.cluster, (JOBS, "apply", created))
    workload = Workload.objects.get(name="train-1")
    workload.job = created
    return workload


def jobs_left(sim):
    return [j["metadata"]["name"] for j in sim.list("jobs.batch", "runai-rnd-a")]


def test_stopping_notes_who_and_the_stopped_workload_keeps_its_page(lab, sim, users, client, stoppable):
    workload = stoppable
    client.force_login(users["researcher"])
    # Stop asks first, naming the pods, GPUs and project; asking stops nothing.
    asked = client.get(reverse("workload-stop", args=[workload.pk]), {"next": "/workloads/"})
    text = asked.content.decode()
    assert asked.status_code == 200 and "Stop workload train-1?" in text and "project <strong>rnd-a</strong>" in text
    assert "The 2 GPUs it asks for" in text and '<input type="hidden" name="next" value="/workloads/">' in text
    assert jobs_left(sim) == ["train-1"]
    # Another site as "next" is not followed.
    assert 'value="https://elsewhere.example/"' not in client.get(
        reverse("workload-stop", args=[workload.pk]), {"next": "https://elsewhere.example/"}).content.decode()
    response = client.post(reverse("workload-stop", args=[workload.pk]), {"next": "/workloads/"})
    assert response.status_code == 302 and response["Location"] == "/workloads/"
    assert jobs_left(sim) == []
    # Until the sync sees the Job go, the row says it is stopping (no second Stop); then it is Stopped.
    row = client.get(reverse("workload-list")).content.decode().split('data-workload="train-1"', 1)[1].split("</tr>")[0]
    assert "Stopping…" in row and "Stop</a>" not in row
    sync(lab.cluster, (JOBS, "delete", stoppable.job))
    page = client.get(reverse("workload-detail", args=[workload.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert '<dd id="workload-phase">Stopped</dd>' in html and "Stopped by researcher" in html
    assert 'aria-label="Stop train-1"' not in html
    # Stopping it again is refused in words; the cluster is not asked.
    with pytest.raises(Exception) as refused:
        services.workload_stop(actor=users["researcher"], workload=Workload.objects.get(pk=workload.pk), api_client=None)
    assert "already ended (Stopped)" in str(refused.value)
    assert WorkloadEvent.objects.filter(kind=WorkloadEventKind.STOP_REQUESTED, actor="researcher").count() == 1


@pytest.mark.parametrize("who", ["rnd_viewer", "cluster_viewer"])
def test_a_viewer_sees_no_stop_and_stopping_is_refused(lab, sim, users, client, api, stoppable, who):
    workload = stoppable
    client.force_login(users[who])
    page = client.get(reverse("workload-list")).content.decode()
    assert 'data-workload="train-1"' in page and reverse("workload-stop", args=[workload.pk]) not in page
    detail = client.get(reverse("workload-detail", args=[workload.pk])).content.decode()
    assert 'aria-label="Stop train-1"' not in detail
    assert client.get(reverse("workload-stop", args=[workload.pk])).status_code == 403
    assert client.post(reverse("workload-stop", args=[workload.pk])).status_code == 403
    assert api(users[who]).delete(f"/api/v1/workloads/{workload.pk}/").status_code == 403
    assert jobs_left(sim) == ["train-1"] and not WorkloadEvent.objects.filter(kind=WorkloadEventKind.STOP_REQUESTED).exists()
    # The timeline itself is theirs to read, on the page and over the API.
    one = api(users[who]).get(f"/api/v1/workloads/{workload.pk}/").json()
    assert [e["what"] for e in one["timeline"]] == ["Submitted by alice", "Started"]
    assert one["timeline"][0]["at"].startswith(at(0)[:16])


def test_ended_workloads_are_hidden_after_an_hour_unless_asked_for_and_the_api_lists_them_all(org, users, client,
                                                                                               api):
    now = timezone.now()
    for name, phase, gone in (("live-1", "Pending", None), ("stopped-now", "Stopped", now),
                              ("stopped-old", "Stopped", now - timedelta(hours=3)),
                              ("done-old", "Succeeded", now - timedelta(hours=3)),
                              ("failed-old", "Failed", now - timedelta(hours=3))):
        Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name=name, phase=phase, gone_at=gone)
    client.force_login(users["researcher"])

    def listed(**query):
        page = client.get(reverse("workload-list"), query).content.decode()
        return {n for n in ("live-1", "stopped-now", "stopped-old", "done-old", "failed-old")
                if f'data-workload="{n}"' in page}

    # Failed ones stay in view (someone should look); finished and stopped ones an hour after they ended go.
    assert listed() == {"live-1", "stopped-now", "failed-old"}
    assert listed(sort="name") == {"live-1", "stopped-now", "failed-old"}
    assert listed(ended="show") == {"live-1", "stopped-now", "stopped-old", "done-old", "failed-old"}
    assert listed(phase="Stopped") == {"stopped-now", "stopped-old"}
    assert listed(phase="Succeeded") == {"done-old"}
    rows = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert {(r["name"], r["phase"]) for r in rows} == {
        ("live-1", "Pending"), ("stopped-now", "Stopped"), ("stopped-old", "Stopped"), ("done-old", "Succeeded"),
        ("failed-old", "Failed")}
    hidden = api(users["researcher"]).get("/api/v1/workloads/", {"ended": "hide"}).json()["results"]
    assert {r["name"] for r in hidden} == {"live-1", "stopped-now", "failed-old"}
