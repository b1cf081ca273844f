"""What-if before saving: siblings' fair shares before and after a quota change."""
from decimal import Decimal

import pytest

from projects.selectors import quota_what_if


@pytest.mark.django_db
def test_raising_one_projects_deserved_quota_shows_what_its_siblings_lose(org, users):
    # rnd-a and rnd-b both ask for all of a100's 8 GPUs; rnd deserves all 8.
    from projects import services

    for owner in (org.rnd,):
        q = org.quota(owner, org.a100)
        services.quota_update(actor=None, quota=q, expected_version=q.version, gpu_deserved=8)
    org.run("a-1", org.rnd_a, "a100-1", gpus=4)
    org.run("b-1", org.rnd_b, "a100-2", gpus=4)
    # Each also waits for 4 more: both ask for the whole pool.
    for name, project in (("a-2", org.rnd_a), ("b-2", org.rnd_b)):
        org.run(name, project, None, gpus=4, phase="Pending")
        org.pods[-1]["spec"]["nodeSelector"] = {"gpu-type": "A100"}
    org.load()
    edited = org.quota(org.rnd_a, org.a100)
    rows = {r.name: r for r in quota_what_if(user=users["rnd_admin"], quota=edited, values={"gpu_deserved": Decimal(6)})}
    assert set(rows) == {"rnd-a", "rnd-b"}
    assert rows["rnd-a"].edited and rows["rnd-a"].after > rows["rnd-a"].before
    assert rows["rnd-b"].after < rows["rnd-b"].before
    assert rows["rnd-a"].after + rows["rnd-b"].after == rows["rnd-a"].before + rows["rnd-b"].before
    # Nothing was saved.
    edited.refresh_from_db()
    assert edited.gpu_deserved == 0


@pytest.mark.django_db
def test_a_department_rows_what_if_lists_the_pools_departments_the_user_may_see(org, users):
    q = org.quota(org.rnd, org.a100)
    names = {r.name for r in quota_what_if(user=users["sysadmin"], quota=q, values={"gpu_deserved": Decimal(4)})}
    assert names == {"rnd", "ops"}
    names = {r.name for r in quota_what_if(user=users["rnd_admin"], quota=q, values={"gpu_deserved": Decimal(4)})}
    assert names == {"rnd"}


@pytest.mark.django_db
def test_the_quota_editor_shows_fair_shares_before_and_after_without_saving(client, org, users):
    from django.urls import reverse

    from projects import services

    q = org.quota(org.rnd, org.a100)
    services.quota_update(actor=None, quota=q, expected_version=q.version, gpu_deserved=8)
    org.run("a-1", org.rnd_a, "a100-1", gpus=4)
    org.run("b-1", org.rnd_b, "a100-2", gpus=4)
    for name, project in (("a-2", org.rnd_a), ("b-2", org.rnd_b)):
        org.run(name, project, None, gpus=4, phase="Pending")
        org.pods[-1]["spec"]["nodeSelector"] = {"gpu-type": "A100"}
    org.load()
    quota = org.quota(org.rnd_a, org.a100)
    client.force_login(users["rnd_admin"])
    data = {"gpu_deserved": "6", "cpu_deserved": "", "memory_deserved_gib": "", "gpu_limit": "", "cpu_limit": "",
            "memory_limit_gib": "", "over_quota_weight": quota.over_quota_weight, "rank": quota.rank,
            "version": quota.version, "what_if": "1"}
    page = client.post(reverse("quota-edit", args=[quota.pk]), data, HTTP_HX_REQUEST="true",
                       HTTP_HX_TARGET=f"quota-{quota.pk}").content.decode()
    assert "Fair share of GPUs in a100, now and with these values (not saved yet)" in page
    assert "rnd-a" in page and "rnd-b" in page and "(this row)" in page
    # rnd-a would deserve 6 of the 8 GPUs and share the 2 idle ones with rnd-b (weights 2:2): 4 → 7, 4 → 1.
    assert '<td class="num">4</td><td class="num">7</td><td class="num">+3</td>' in page
    assert '<td>rnd-b</td><td class="num">4</td><td class="num">1</td><td class="num">-3</td>' in page
    quota.refresh_from_db()
    assert quota.gpu_deserved == 0  # nothing saved


@pytest.mark.django_db
def test_a_quota_raised_for_a_project_without_demand_says_its_change_is_limited_by_demand(org, users):
    from projects import services

    q = org.quota(org.rnd, org.a100)
    services.quota_update(actor=None, quota=q, expected_version=q.version, gpu_deserved=8)
    org.run("b-1", org.rnd_b, "a100-2", gpus=2)
    edited = org.quota(org.rnd_a, org.a100)
    rows = {r.name: r for r in quota_what_if(user=users["rnd_admin"], quota=edited, values={"gpu_deserved": Decimal(8)})}
    a, b = rows["rnd-a"], rows["rnd-b"]
    assert (a.before, a.after, a.change) == (0, 0, 0)
    assert a.limited_by_demand and a.requested == 0 and a.with_demand == 8
    # rnd-b holds what it asks (2 GPUs) before and after: its share is not held back by the change.
    assert (b.before, b.after) == (2, 2) and not b.limited_by_demand
    # A project asking for more than its new quota is not limited by demand.
    org.run("a-1", org.rnd_a, "a100-1", gpus=4)
    org.run("a-2", org.rnd_a, None, gpus=4, phase="Pending")
    org.pods[-1]["spec"]["nodeSelector"] = {"gpu-type": "A100"}
    org.load()
    rows = {r.name: r for r in quota_what_if(user=users["rnd_admin"], quota=edited, values={"gpu_deserved": Decimal(4)})}
    assert rows["rnd-a"].requested == 8 and not rows["rnd-a"].limited_by_demand


@pytest.mark.django_db
def test_the_quota_editor_says_a_fair_share_unchanged_for_want_of_demand(client, org, users):
    from django.urls import reverse

    from projects import services
    from tests.pages import page_text

    q = org.quota(org.rnd, org.a100)
    services.quota_update(actor=None, quota=q, expected_version=q.version, gpu_deserved=8)
    quota = org.quota(org.rnd_a, org.a100)
    client.force_login(users["rnd_admin"])
    data = {"gpu_deserved": "8", "cpu_deserved": "", "memory_deserved_gib": "", "gpu_limit": "", "cpu_limit": "",
            "memory_limit_gib": "", "over_quota_weight": quota.over_quota_weight, "rank": quota.rank,
            "version": quota.version, "what_if": "1"}
    response = client.post(reverse("quota-edit", args=[quota.pk]), data)
    page = page_text(response)
    assert "rnd-a (this row) 0 0 0 (limited by demand)" in page
    assert ("rnd-a: fair share unchanged: the project asks for 0 GPUs in this pool now; it would rise up to 8 "
            "with demand.") in page
    assert "rnd-b: fair share" not in page
    quota.refresh_from_db()
    assert quota.gpu_deserved == 0  # nothing saved
