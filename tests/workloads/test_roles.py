"""Who sees, submits and stops what (docs/concepts.md#roles): every role of the test organisation against the
workloads of rnd-a (where the project roles are) and ops-a (another department)."""
from __future__ import annotations

import pytest
from django.urls import reverse

from workloads.models import Workload

pytestmark = pytest.mark.django_db

# role -> (sees rnd-a's, sees ops-a's, may submit to rnd-a, may stop rnd-a's)
MATRIX = {
    "sysadmin": (True, True, True, True),
    "rnd_admin": (True, False, True, True),
    "rnd_viewer": (True, False, False, False),
    "proj_admin": (True, False, True, True),
    "researcher": (True, False, True, True),
    "cluster_viewer": (True, True, False, False),
    "nobody": (False, False, False, False),
}


@pytest.fixture
def rows(org):
    """What the sync would have mirrored: one Job in rnd-a's namespace, one in ops-a's."""
    def mirrored(namespace, name):
        return Workload.objects.create(cluster=org.cluster, namespace=namespace, name=name, pools_tried=["default"],
                                       priority_class="train", priority=50, phase="Pending")

    return {"rnd-a": mirrored("runai-rnd-a", "mine-1"), "ops-a": mirrored("runai-ops-a", "theirs-1")}


@pytest.mark.parametrize("who", list(MATRIX))
def test_role_matrix(who, org, users, rows, api, client):
    sees_own, sees_other, submits, stops = MATRIX[who]
    user = users[who]
    listed = {w["name"] for w in api(user).get("/api/v1/workloads/").json()["results"]}
    assert ("mine-1" in listed) == sees_own and ("theirs-1" in listed) == sees_other
    client.force_login(user)
    page = client.get(reverse("workload-list")).content.decode()
    assert ('data-workload="mine-1"' in page) == sees_own
    assert ('data-workload="theirs-1"' in page) == sees_other
    # The Stop button is offered exactly where stopping is allowed.
    assert (reverse("workload-stop", args=[rows["rnd-a"].pk]) in page) == stops
    # Submitting (a dry run: the whole flow, nothing created).
    response = api(user).post("/api/v1/workloads/", {"project": org.rnd_a.pk, "image": "busybox", "dry_run": True},
                              format="json")
    if submits:
        assert response.status_code == 200, response.content
        assert response.json()["job"]["metadata"]["namespace"] == "runai-rnd-a"
    else:  # no submit role on rnd-a (nor, here, anywhere)
        assert response.status_code == 403
    submit_page = client.get(reverse("workload-submit"))
    assert submit_page.status_code == (200 if submits else 403)
    # Stopping: refused before the cluster is asked (it has none here).
    if not stops:
        expected = 403 if sees_own else 404
        assert api(user).delete(f"/api/v1/workloads/{rows['rnd-a'].pk}/").status_code == expected
        assert client.post(reverse("workload-stop", args=[rows["rnd-a"].pk])).status_code == expected
        # Nor is the confirmation offered (it would name what stops).
        assert client.get(reverse("workload-stop", args=[rows["rnd-a"].pk])).status_code == expected
        assert Workload.objects.filter(pk=rows["rnd-a"].pk).exists()


def test_an_unreachable_cluster_is_a_clear_503_and_nothing_changes(org, users, rows, api):
    response = api(users["researcher"]).delete(f"/api/v1/workloads/{rows['rnd-a'].pk}/")
    assert response.status_code == 503
    assert response.json()["detail"].startswith("The cluster lab could not be reached")
    response = api(users["researcher"]).post("/api/v1/workloads/", {"project": org.rnd_a.pk, "image": "busybox"},
                                             format="json")
    assert response.status_code == 503


def test_the_table_lists_the_youngest_first_and_filters_per_project_and_pool(org, users, client):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    for minutes, name, pools in ((30, "old-1", ["a100"]), (5, "new-1", ["default"]), (15, "mid-1", ["a100", "default"])):
        Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name=name, pools_tried=pools,
                                created_in_cluster=now - timedelta(minutes=minutes))
    client.force_login(users["researcher"])
    page = client.get(reverse("workload-list")).content.decode()
    assert [n for n in ("new-1", "mid-1", "old-1") if f'data-workload="{n}"' in page] == ["new-1", "mid-1", "old-1"]
    assert page.index('data-workload="new-1"') < page.index('data-workload="mid-1"') < page.index('data-workload="old-1"')
    a100 = client.get(reverse("workload-list"), {"pool": org.a100.pk}).content.decode()
    assert 'data-workload="old-1"' in a100 and 'data-workload="mid-1"' in a100 and 'data-workload="new-1"' not in a100
    Workload.objects.create(cluster=org.cluster, namespace="runai-ops-a", name="ops-1", pools_tried=["default"])
    client.force_login(users["sysadmin"])
    ops = client.get(reverse("workload-list"), {"project": org.ops_a.pk}).content.decode()
    assert ops.count("data-workload=") == 1 and 'data-workload="ops-1"' in ops


def test_a_pending_workload_says_why_it_waits_from_the_quotas_and_nodes(org, users, api):
    """No scheduler condition to go by: the console's own reading of its pending pod (projects.waiting)."""
    org.run("big-0", org.rnd_a, None, gpus=8, phase="Pending",
            labels={"batch.kubernetes.io/job-name": "big", "job-name": "big"})
    Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="big", pools_tried=["default"],
                            priority_class="train", priority=50, gpus=8, phase="Pending")
    [row] = api(users["researcher"]).get("/api/v1/workloads/").json()["results"]
    assert row["phase"] == "Pending"
    from projects.waiting import waiting_requests

    [waiting] = [w for w in waiting_requests(user=users["researcher"], project=org.rnd_a) if w.name == "big-0"]
    assert row["pending_reason"] == waiting.reason.text and "8" in row["pending_reason"]


def test_stopping_a_one_gpu_workload_says_it_in_the_singular(org, users, client):
    from decimal import Decimal

    from tests.pages import page_text
    workload = Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="one-gpu", gpus=Decimal(1),
                                       pools_tried=["default"], priority_class="train", priority=50, phase="Pending")
    client.force_login(users["sysadmin"])
    shown = page_text(client.get(reverse("workload-stop", args=[workload.pk])))
    assert "The 1 GPU it asks for is no longer waited for, and counts no more against project rnd-a's quota." in shown
