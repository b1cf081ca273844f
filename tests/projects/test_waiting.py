"""Why is it waiting? Each answer from a scripted cluster state."""
from __future__ import annotations

from decimal import Decimal as D

import pytest

from projects.waiting import Owner, PoolFacts, explain, waiting_requests

POOL = PoolFacts("a100", nodes=((D(8), D(0)), (D(8), D(2))),
                 borrowers=(("project", "team-nlp", D(6)), ("department", "rnd", D(4))))
ROOMY = PoolFacts("a100", nodes=((D(8), D(8)),))


def test_over_the_projects_limit():
    reason = explain(gpus=D(2), priority=50, project=Owner("vision", D(4), D(7), limit=D(8)),
                     department=Owner("rnd", D(20)), pool=ROOMY)
    assert reason.code == "over_limit"
    assert "project vision uses 7 of its 8 GPU limit in a100; this asks 2 more" in reason.text


def test_over_the_departments_limit():
    reason = explain(gpus=D(1), priority=50, project=Owner("vision", D(4), D(0)),
                     department=Owner("rnd", D(20), D(24), limit=D(24)), pool=ROOMY)
    assert reason.code == "over_limit" and "department rnd uses 24 of its 24 GPU limit" in reason.text


def test_over_quota_off_keeps_a_preemptible_request_within_deserved():
    reason = explain(gpus=D(1), priority=50, project=Owner("vision", D(4), D(4)), department=Owner("rnd", D(20)),
                     pool=ROOMY, allow_over_quota=False)
    assert reason.code == "over_quota_off" and "Over-quota is off for project vision" in reason.text


def test_non_preemptible_work_over_the_projects_deserved_quota():
    reason = explain(gpus=D(2), priority=125, project=Owner("vision", D(4), D(3), non_preemptible=D(3)),
                     department=Owner("rnd", D(20), D(3), non_preemptible=D(3)), pool=ROOMY)
    assert reason.code == "non_preemptible_over_quota"
    assert "project vision runs 3 non-preemptible GPUs of 4 deserved in a100; this asks 2 more" in reason.text


def test_non_preemptible_work_over_the_departments_deserved_quota():
    reason = explain(gpus=D(2), priority=100, project=Owner("vision", D(4)),
                     department=Owner("rnd", D(4), D(3), non_preemptible=D(3)), pool=ROOMY)
    assert reason.code == "non_preemptible_over_quota" and "department rnd" in reason.text


def test_no_node_can_fit_it():
    reason = explain(gpus=D(16), priority=50, project=Owner("vision", D(20)), department=Owner("rnd", D(20)),
                     pool=POOL)
    assert reason.code == "no_node_fits"
    assert reason.text.startswith("Never fits: no node of a100 has 16 GPUs (the largest Ready node has 8)")


def test_never_fitting_leads_even_when_the_quota_refuses_it_too():
    """The hardest fact first: a non-preemptible 8-GPU request beyond its deserved quota, in a pool whose nodes
    have 4 GPUs, never fits — whatever its quota; that is its reason (the quota is the scheduler's to add)."""
    reason = explain(gpus=D(8), priority=125, project=Owner("serve-search", D(5), D(4), non_preemptible=D(4)),
                     department=Owner("ml-ops", D(20)),
                     pool=PoolFacts("a100-40gb", nodes=((D(4), D(0)), (D(4), D(4))), borrowers=()))
    assert reason.code == "no_node_fits"
    assert reason.text.startswith("Never fits: no node of a100-40gb has 8 GPUs (the largest Ready node has 4)")


def test_the_quota_counts_what_its_scheduler_counts_and_names_the_other_pods():
    """With KAI enforcing, only KAI's pods count against its queue: the 4 GPUs of a pod kube-scheduler placed
    are named apart, not added (the figure KAI's own message gives)."""
    project = Owner("serve-search", D(5), D(0), non_preemptible=D(0),
                    others=(("default-scheduler", D(4), D(4)),))
    reason = explain(gpus=D(6), priority=125, project=project, department=Owner("ml-ops", D(20)), pool=ROOMY)
    assert reason.code == "non_preemptible_over_quota"
    assert "project serve-search runs 0 non-preemptible GPUs of 5 deserved" in reason.text
    assert reason.text.endswith("Not counted against its quota by the scheduler (it did not schedule them): "
                                "4 GPUs on pods of default-scheduler.")


def test_the_pool_is_full_and_names_who_borrows():
    reason = explain(gpus=D(4), priority=50, project=Owner("vision", D(4)), department=Owner("rnd", D(20)), pool=POOL)
    assert reason.code == "pool_full"
    assert "a100 has 2 GPUs free" in reason.text
    assert "project team-nlp (+6), department rnd (+4)" in reason.text
    assert reason.borrowers[0] == ("project", "team-nlp", D(6))


def test_a_request_that_fits_waits_for_the_scheduler():
    reason = explain(gpus=D(2), priority=50, project=Owner("vision", D(4)), department=Owner("rnd", D(20)), pool=POOL)
    assert reason.code == "schedulable"


@pytest.mark.django_db
def test_waiting_requests_read_the_clusters_pending_pods(org, users):
    """rnd-a's pods fill a100 (two nodes of 4 GPUs) beyond its deserved 2: a pending 2-GPU pod waits for a
    full pool and names rnd-a as the borrower; an 8-GPU pod fits no node; ops-a sees nothing of rnd."""
    from projects import services

    quota = org.quota(org.rnd_a, org.a100)
    services.quota_update(actor=None, quota=quota, expected_version=quota.version, gpu_deserved=2)
    org.run("train-1", org.rnd_a, "a100-1", gpus=4)
    org.run("train-2", org.rnd_a, "a100-2", gpus=4)
    # One names its pool through KAI's queue label, the other through a node selector.
    org.run("waits", org.rnd_a, None, gpus=2, phase="Pending", labels={"kai.scheduler/queue": "rnd-a.a100"})
    org.run("too-big", org.rnd_a, None, gpus=8, phase="Pending")
    org.pods[-1]["spec"]["nodeSelector"] = {"gpu-type": "A100"}
    org.load()
    rows = {r.name: r for r in waiting_requests(user=users["researcher"], project=org.rnd_a)}
    assert rows["waits"].pool == "a100" and rows["waits"].reason.code == "pool_full"
    assert "project rnd-a (+6)" in rows["waits"].reason.text
    assert rows["too-big"].reason.code == "no_node_fits"
    assert waiting_requests(user=users["researcher"], department=org.ops) == []
    by_department = waiting_requests(user=users["rnd_viewer"], department=org.rnd)
    assert {r.name for r in by_department} == {"waits", "too-big"}


@pytest.mark.django_db
def test_gpus_held_by_pods_of_no_project_are_not_free(org, users):
    """A GPU a pod outside every project holds (a shared service's namespace) is as taken as any: with
    a100's 8 GPUs held that way, a 2-GPU request waits for a full pool, not for the scheduler."""
    from kubesim import make_pod

    for node in ("a100-1", "a100-2"):
        org.pods.append(make_pod(f"infra-{node}", "shared-infra", node=node, phase="Running",
                                 containers=[{"name": "main", "requests": {"nvidia.com/gpu": "4"}}]))
    org.run("waits", org.rnd_a, None, gpus=2, phase="Pending", labels={"kai.scheduler/queue": "rnd-a.a100"})
    [row] = waiting_requests(user=users["researcher"], project=org.rnd_a)
    assert row.pool == "a100" and row.reason.code == "pool_full"
    assert "a100 has 0 GPUs free" in row.reason.text


@pytest.mark.django_db
def test_the_project_and_department_pages_say_why_work_waits(org, users, client):
    org.run("too-big", org.rnd_a, None, gpus=8, phase="Pending")
    org.pods[-1]["spec"]["nodeSelector"] = {"gpu-type": "A100"}
    org.load()
    client.force_login(users["researcher"])
    page = client.get(f"/projects/{org.rnd_a.pk}/").content.decode()
    assert "Why is it waiting?" in page and "runai-rnd-a/too-big" in page
    assert "Never fits: no node of a100 has 8 GPUs (the largest Ready node has 4)" in page
    client.force_login(users["rnd_viewer"])
    page = client.get(f"/departments/{org.rnd.pk}/").content.decode()
    assert "runai-rnd-a/too-big" in page
    client.force_login(users["cluster_viewer"])
    assert "runai-rnd-a/too-big" not in client.get(f"/departments/{org.ops.pk}/").content.decode()


@pytest.mark.django_db
def test_a_long_wait_list_shows_the_longest_waiting_and_points_to_the_api_for_all(org, users, client, api,
                                                                                   monkeypatch):
    import datetime

    from projects import views

    monkeypatch.setattr(views, "WAITING_SHOWN", 2)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    for i in range(3):
        org.run(f"waits-{i}", org.rnd_a, None, gpus=8, phase="Pending",
                created=start + datetime.timedelta(minutes=10 - i))
    client.force_login(users["researcher"])
    page = client.get(f"/projects/{org.rnd_a.pk}/").content.decode()
    assert "runai-rnd-a/waits-2" in page and "runai-rnd-a/waits-1" in page and "runai-rnd-a/waits-0" not in page
    assert (f'The 2 longest waiting of 3; <a href="/api/v1/projects/{org.rnd_a.pk}/waiting">every one</a>'
            in page)
    rows = api(users["researcher"]).get(f"/api/v1/projects/{org.rnd_a.pk}/waiting").json()
    assert [r["name"] for r in rows] == ["waits-2", "waits-1", "waits-0"]


@pytest.mark.django_db
def test_the_api_says_why_work_waits_to_those_who_may_see_it(org, users, api):
    org.run("too-big", org.rnd_a, None, gpus=8, phase="Pending")
    org.pods[-1]["spec"]["nodeSelector"] = {"gpu-type": "A100"}
    org.load()
    rows = api(users["researcher"]).get(f"/api/v1/projects/{org.rnd_a.pk}/waiting").json()
    assert [(r["name"], r["reason"], r["pool"]) for r in rows] == [("too-big", "no_node_fits", "a100")]
    assert api(users["researcher"]).get(f"/api/v1/projects/{org.ops_a.pk}/waiting").status_code == 404


def test_counts_of_one_read_in_the_singular():
    one_free = PoolFacts("a100", nodes=((D(1), D(1)), (D(1), D(0))), borrowers=())
    reason = explain(gpus=D(2), priority=50, project=Owner("vision", D(4)), department=Owner("rnd", D(20)),
                     pool=one_free)
    assert reason.code == "no_node_fits" and "no node of a100 has 2 GPUs (the largest Ready node has 1)" in reason.text
    reason = explain(gpus=D(1), priority=50, project=Owner("vision", D(4)), department=Owner("rnd", D(20)),
                     pool=PoolFacts("a100", nodes=((D(2), D(0)), (D(2), D(0))), borrowers=()))
    assert reason.code == "pool_full" and "a100 has 0 GPUs free" in reason.text
    reason = explain(gpus=D(2), priority=50, project=Owner("vision", D(4)), department=Owner("rnd", D(20)),
                     pool=PoolFacts("a100", nodes=((D(2), D(1)), (D(2), D(0))), borrowers=()))
    assert reason.code == "pool_full" and "a100 has 1 GPU free" in reason.text and "1 GPUs" not in reason.text
    reason = explain(gpus=D(2), priority=125, project=Owner("vision", D(2), D(1), non_preemptible=D(1)),
                     department=Owner("rnd", D(20), D(1), non_preemptible=D(1)),
                     pool=PoolFacts("a100", nodes=((D(8), D(8)),)))
    assert reason.code == "non_preemptible_over_quota", reason.text
    assert "runs 1 non-preemptible GPU of 2 deserved" in reason.text


def test_noun_and_verb_agree_with_the_count():
    from common.words import noun, verb

    assert [noun(n, "GPU") for n in (0, 1, D(1), D("1.0"), D("0.5"), 2)] == ["GPUs", "GPU", "GPU", "GPU", "GPUs", "GPUs"]
    assert noun(1, "day") == "day" and noun(3, "entry", "entries") == "entries"
    assert verb(1, "keeps", "keep") == "keeps" and verb(2, "keeps", "keep") == "keep"
