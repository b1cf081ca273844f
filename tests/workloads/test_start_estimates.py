"""A start estimate for every pending workload (issue 23, point 3), on a scripted cluster (tests/conftest.py
`Org`: a100 has two 4-GPU nodes): each basis — the running workloads' usual length (median and 90th
percentile of finished workloads of the same project and priority class), their activeDeadlineSeconds, the
workloads ahead in the queue, the project's own limit (KAI's rules) — and "no estimate" with why; shown in the
workloads table (a column and its CSV), the API and the project page."""
from __future__ import annotations

import re

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.pages import csv_of
from workloads import render
from workloads.models import Workload
from workloads.sync import jobs_mirror

pytestmark = pytest.mark.django_db

MIN = 60


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name, project, *, gpus, pods=1, klass="train", pools=("a100",), started=None, finished=None,
        deadline=None, created=None, phase="Pending"):
    now = timezone.now()
    template = {"metadata": {"labels": {}}, "spec": {"priorityClassName": klass, "containers": [
        {"name": "main", "image": "img", "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                         "limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    obj = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": f"runai-{project.name}",
                        "creationTimestamp": stamp(created or (started or now) - dt.timedelta(seconds=1)),
                        "annotations": {render.POOLS_ANNOTATION: ",".join(pools)}},
           "spec": {"parallelism": pods, "completions": pods, "template": template}, "status": {}}
    if deadline:
        obj["spec"]["activeDeadlineSeconds"] = deadline
    if started:
        obj["status"]["startTime"] = stamp(started)
    if finished:
        obj["status"]["completionTime"] = stamp(finished)
        obj["status"]["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": stamp(finished)}]
    return obj


def run_pod(org, name, project, node, *, gpus, job_name, started, priority=50, phase="Running"):
    org.run(name, project, node, gpus=gpus, priority=priority, phase=phase,
            labels={render.JOB_NAME_LABEL: job_name, "job-name": job_name})
    status = org.pods[-1]["status"]
    status["startTime"] = stamp(started)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled":  # bound then: when its run began (kube.pod_times)
            condition["lastTransitionTime"] = stamp(started)
    org.load()


def history(org, project, klass, minutes):
    """Finished workloads of the project and class that ran these many minutes (ended an hour ago)."""
    end = timezone.now() - dt.timedelta(hours=1)
    jobs_mirror(cluster=org.cluster, jobs=[
        job(f"done-{project.name}-{i}", project, gpus=4, klass=klass, started=end - dt.timedelta(minutes=m),
            finished=end) for i, m in enumerate(minutes)])


@pytest.fixture
def busy(org):
    """rnd-b runs one 4-GPU train job on each a100 node, started 10 minutes ago; its finished train jobs ran
    30, 40 and 60 minutes."""
    history(org, org.rnd_b, "train", [30, 40, 60])
    ago = timezone.now() - dt.timedelta(minutes=10)
    jobs_mirror(cluster=org.cluster, jobs=[job("b-train-1", org.rnd_b, gpus=4, started=ago),
                                           job("b-train-2", org.rnd_b, gpus=4, started=ago)])
    run_pod(org, "b-train-1-x", org.rnd_b, "a100-1", gpus=4, job_name="b-train-1", started=ago)
    run_pod(org, "b-train-2-x", org.rnd_b, "a100-2", gpus=4, job_name="b-train-2", started=ago)
    return org


def minutes(estimate) -> tuple[int, int]:
    return round(estimate["earliest_seconds"] / MIN), round(estimate["latest_seconds"] / MIN)


def estimates(api, user):
    rows = api(user).get("/api/v1/workloads/", {"page_size": 100}).json()["results"]
    return {row["name"]: row["start_estimate"] for row in rows}


def test_an_estimate_from_the_usual_length_of_the_running_workloads(busy, users, api):
    jobs_mirror(cluster=busy.cluster, jobs=[job("a-wait", busy.rnd_a, gpus=4)])
    estimate = estimates(api, users["sysadmin"])["a-wait"]
    # rnd-b's jobs run 40 (median) to 60 (90th percentile) minutes; 10 are done: 30–50 minutes from now.
    assert minutes(estimate) == (30, 50)
    assert estimate["text"] == "in 30–50 min: 8 GPUs free when rnd-b's two train jobs end at their usual length"
    assert estimates(api, users["sysadmin"])["b-train-1"] is None  # running: no estimate


def test_an_estimate_from_a_deadline(org, users, api):
    ago = timezone.now() - dt.timedelta(minutes=5)
    jobs_mirror(cluster=org.cluster, jobs=[job("b-deadline", org.rnd_b, gpus=4, started=ago, deadline=25 * MIN),
                                           job("b-deadline-2", org.rnd_b, gpus=4, started=ago, deadline=25 * MIN),
                                           job("a-wait", org.rnd_a, gpus=4)])
    run_pod(org, "bd-1", org.rnd_b, "a100-1", gpus=4, job_name="b-deadline", started=ago)
    run_pod(org, "bd-2", org.rnd_b, "a100-2", gpus=4, job_name="b-deadline-2", started=ago)
    estimate = estimates(api, users["sysadmin"])["a-wait"]
    assert estimate["earliest_seconds"] == 0 and 19 * MIN <= estimate["latest_seconds"] <= 20 * MIN
    assert estimate["text"] == "in 0–20 min: 8 GPUs free when rnd-b's two train jobs end by their deadline"


def test_an_estimate_counts_the_workloads_ahead_in_the_queue(busy, users, api):
    # An older rnd-a job (two pods of 4 GPUs) waits first; once started it runs its usual 40–60 minutes.
    history(busy, busy.rnd_a, "train", [40, 60])
    now = timezone.now()
    jobs_mirror(cluster=busy.cluster, jobs=[
        job("a-first", busy.rnd_a, gpus=4, pods=2, created=now - dt.timedelta(minutes=3)),
        job("a-second", busy.rnd_a, gpus=4, pods=2, created=now - dt.timedelta(minutes=1))])
    found = estimates(api, users["sysadmin"])
    assert found["a-first"]["text"].startswith("in 30–50 min: 8 GPUs free when rnd-b's two train jobs end")
    second = found["a-second"]
    assert second["ahead_in_queue"] == 1
    # a-first takes the pool at 30–50 min and runs 40–60: a-second starts 70–110 minutes from now.
    assert minutes(second) == (70, 110)
    assert second["text"].startswith("in 70–110 min: 1 workload ahead in the queue; 8 GPUs free when")


def test_the_same_workload_submitted_again_gives_its_own_usual_length(org, users, api):
    # rnd-b's train jobs run 30 to 60 minutes, but "nightly" (submitted as nightly-1, nightly-2) runs 20.
    history(org, org.rnd_b, "train", [30, 40, 60])
    end = timezone.now() - dt.timedelta(hours=1)
    jobs_mirror(cluster=org.cluster, jobs=[job(f"nightly-{i}", org.rnd_b, gpus=4, started=end - dt.timedelta(minutes=20),
                                               finished=end) for i in (1, 2)])
    ago = timezone.now() - dt.timedelta(minutes=5)
    jobs_mirror(cluster=org.cluster, jobs=[job("nightly-3", org.rnd_b, gpus=4, started=ago),
                                           job("nightly-4", org.rnd_b, gpus=4, started=ago),
                                           job("a-wait", org.rnd_a, gpus=4)])
    run_pod(org, "n3", org.rnd_b, "a100-1", gpus=4, job_name="nightly-3", started=ago)
    run_pod(org, "n4", org.rnd_b, "a100-2", gpus=4, job_name="nightly-4", started=ago)
    assert minutes(estimates(api, users["sysadmin"])["a-wait"]) == (15, 15)


def test_a_workload_over_its_limit_waits_for_its_own_project_under_kai(busy, users, api):
    from enforcers.services import enforcement_set
    from projects.services import quota_update

    enforcement_set(actor=None, cluster=busy.cluster, enforcer="kai")
    row = busy.quota(busy.rnd_b, busy.a100)
    quota_update(actor=None, quota=row, expected_version=row.version, gpu_deserved=Decimal(8), gpu_limit=Decimal(8))
    jobs_mirror(cluster=busy.cluster, jobs=[job("b-more", busy.rnd_b, gpus=4)])
    estimate = estimates(api, users["sysadmin"])["b-more"]
    assert minutes(estimate) == (30, 50)
    assert "rnd-b's two train jobs end at their usual length" in estimate["text"]


def test_no_estimate_without_deadline_or_history_and_says_why(org, users, api):
    ago = timezone.now() - dt.timedelta(minutes=5)
    jobs_mirror(cluster=org.cluster, jobs=[job("ops-run", org.ops_a, gpus=4, klass="build", started=ago),
                                           job("ops-run-2", org.ops_a, gpus=4, klass="build", started=ago),
                                           job("a-wait", org.rnd_a, gpus=4)])
    run_pod(org, "o-1", org.ops_a, "a100-1", gpus=4, job_name="ops-run", started=ago, priority=100)
    run_pod(org, "o-2", org.ops_a, "a100-2", gpus=4, job_name="ops-run-2", started=ago, priority=100)
    estimate = estimates(api, users["sysadmin"])["a-wait"]
    assert estimate["earliest_seconds"] is None
    assert estimate["text"] == ("no estimate: it needs GPUs that ops-a's two build jobs hold, and they have neither "
                                "activeDeadlineSeconds nor finished workloads of their project and priority class to "
                                "measure their usual length")


def test_no_estimate_for_a_workload_that_never_fits(org, users, api):
    jobs_mirror(cluster=org.cluster, jobs=[job("too-big", org.rnd_a, gpus=8)])
    estimate = estimates(api, users["sysadmin"])["too-big"]
    assert estimate["earliest_seconds"] is None and estimate["text"].endswith("it never fits")


def test_the_table_its_csv_and_the_project_page_show_the_estimate(busy, users, client):
    jobs_mirror(cluster=busy.cluster, jobs=[job("a-wait", busy.rnd_a, gpus=4)])
    client.force_login(users["researcher"])
    html = client.get(reverse("workload-list")).content.decode()
    row = html[html.index('data-workload="a-wait"'):]
    row = row[:row.index("</tr>")]
    # The table shows "estimating…" in the row's cell, then fetches the estimates after the page (htmx) and
    # swaps each into its cell by its id.
    assert "estimating…" in row, row
    cell_id = re.search(r'id="(start-estimate-\d+)"', row).group(1)
    url = re.search(r'hx-get="([^"]*start-estimates[^"]*)" hx-trigger="load"', html).group(1)
    fetched = client.get(url.replace("&amp;", "&"), headers={"HX-Request": "true"}).content.decode()
    cell = fetched[fetched.index(f'id="{cell_id}"'):]
    cell = cell[:cell.index("</span>\n")]
    assert 'hx-swap-oob="true"' in cell and "in 30–50 min" in cell, cell
    assert "8 GPUs free when rnd-b&#x27;s two train jobs end at their usual length" in cell, cell
    header, *rows = csv_of(client.get(reverse("workload-list"), {"format": "csv", "columns": "all"}))
    [mine] = [dict(zip(header, r)) for r in rows if r[header.index("Workload")] == "a-wait"]
    assert mine["Start estimate"] == "in 30–50 min: 8 GPUs free when rnd-b's two train jobs end at their usual length"
    # The project page fetches its "When will they start?" section after it loads (htmx), from this address.
    page = client.get(reverse("project-detail", args=[busy.rnd_a.pk])).content.decode()
    url = reverse("project-start-estimates", args=[busy.rnd_a.pk])
    assert f'hx-get="{url}"' in page and 'hx-trigger="load"' in page
    fetched = client.get(url, headers={"HX-Request": "true"}).content.decode()
    section = fetched[fetched.index('id="start-estimates"'):]
    assert 'data-workload="a-wait"' in section and "in 30–50 min" in section
