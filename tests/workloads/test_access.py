"""Who may submit to a pool (docs/concepts.md#roles, OSMO's pool roles): open pools, pools listing departments,
projects or groups, maintenance, and who may change that (audited)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied

from access.rules import Role
from audit.models import AuditEvent
from workloads.rules import submit_refusal
from workloads.selectors import submittable_pools
from workloads.submission import pool_access_set

pytestmark = pytest.mark.django_db


def test_a_pool_without_settings_is_open_to_every_project_of_its_cluster(org, users):
    assert submit_refusal(users["researcher"], org.a100, org.rnd_a) == ""
    assert submit_refusal(users["researcher"], org.default, org.rnd_a) == ""
    assert {p.name for p in submittable_pools(user=users["researcher"], project=org.rnd_a)} == {"default", "a100"}


def test_no_submit_role_is_refused_whatever_the_pool(org, users):
    for who in ("rnd_viewer", "cluster_viewer", "nobody"):
        assert "researcher or project administrator" in submit_refusal(users[who], org.a100, org.rnd_a)
    # A researcher of rnd-a has no role on rnd-b.
    assert submit_refusal(users["researcher"], org.a100, org.rnd_b).startswith("You may not submit workloads to project rnd-b")


def test_a_closed_pool_admits_only_the_listed_departments_projects_and_groups(org, users):
    pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=False, maintenance=False,
                    projects=[org.rnd_b])
    refusal = submit_refusal(users["researcher"], org.a100, org.rnd_a)
    assert "Pool a100 is open only to" in refusal and "rnd-a is not one of them" in refusal
    assert [p.name for p in submittable_pools(user=users["researcher"], project=org.rnd_a)] == ["default"]
    # The department lists it.
    pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=False, maintenance=False,
                    departments=[org.rnd])
    assert submit_refusal(users["researcher"], org.a100, org.rnd_a) == ""
    # A group the user belongs to lists it.
    team = Group.objects.create(name="a100-users")
    pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=False, maintenance=False, groups=[team])
    assert submit_refusal(users["researcher"], org.a100, org.rnd_a) != ""
    users["researcher"].groups.add(team)
    assert submit_refusal(users["researcher"], org.a100, org.rnd_a) == ""
    assert "a100" in {p.name for p in submittable_pools(user=users["researcher"], project=org.rnd_a)}


def test_maintenance_refuses_everyone_but_system_administrators(org, users):
    pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=True, maintenance=True,
                    maintenance_note="driver upgrade until 18:00")
    for who in ("researcher", "proj_admin", "rnd_admin"):
        refusal = submit_refusal(users[who], org.a100, org.rnd_a)
        assert refusal == ("Pool a100 is in maintenance (driver upgrade until 18:00): only system administrators "
                           "may submit to it now."), who
        assert "a100" not in {p.name for p in submittable_pools(user=users[who], project=org.rnd_a)}
    assert submit_refusal(users["sysadmin"], org.a100, org.rnd_a) == ""
    assert "a100" in {p.name for p in submittable_pools(user=users["sysadmin"], project=org.rnd_a)}
    # The other pool is not affected.
    assert submit_refusal(users["researcher"], org.default, org.rnd_a) == ""


def test_only_system_and_cluster_administrators_change_access_and_it_is_audited(org, users):
    from projects import services
    from tests.conftest import make_user

    for who in ("researcher", "proj_admin", "rnd_admin", "rnd_viewer", "cluster_viewer"):
        with pytest.raises(PermissionDenied):
            pool_access_set(actor=users[who], pool=org.a100, open_to_cluster=True, maintenance=True)
    cluster_admin = make_user("cluster-admin")
    services.role_assign(actor=None, role=Role.DEPARTMENT_ADMIN, user=cluster_admin, cluster=org.cluster)
    row = pool_access_set(actor=cluster_admin, pool=org.a100, open_to_cluster=False, maintenance=True,
                          departments=[org.ops])
    assert row.maintenance and not row.open_to_cluster
    event = AuditEvent.objects.filter(object_type="poolaccess").latest("when")
    assert event.actor == cluster_admin and event.action == AuditEvent.Action.CREATE
    assert event.after["departments"] == ["ops"] and event.after["maintenance"] is True


def test_access_page_shows_the_state_and_saves_for_a_cluster_administrator_only(client, org, users):
    from django.urls import reverse

    url = reverse("pool-access", args=[org.a100.pk])
    client.force_login(users["researcher"])
    assert client.get(url).status_code == 200
    assert client.post(url, {"maintenance": "on", "open_to_cluster": "on"}).status_code == 403
    client.force_login(users["sysadmin"])
    response = client.post(url, {"maintenance": "on", "open_to_cluster": "on", "maintenance_note": "upgrade"},
                           follow=True)
    assert "In maintenance" in response.content.decode()
    assert org.a100.access.maintenance


def test_submitting_through_the_api_to_a_pool_in_maintenance_names_the_pool(lab, users, api, sim):
    pool_access_set(actor=users["sysadmin"], pool=lab.a100, open_to_cluster=True, maintenance=True)
    response = api(users["researcher"]).post("/api/v1/workloads/", {
        "project": lab.rnd_a.pk, "pools": ["a100", "default"], "image": "busybox"}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"]["pools"] == [
        "Pool a100 is in maintenance: only system administrators may submit to it now."]
    assert sim.list("jobs.batch") == []


def test_the_pool_page_says_who_may_submit_and_links_its_workloads(client, org, users):
    from django.urls import reverse

    client.force_login(users["researcher"])
    page = client.get(reverse("pool-detail", args=[org.a100.pk])).content.decode()
    assert "open to every project of the cluster" in page
    assert f'href="{reverse("workload-list")}?pool={org.a100.pk}"' in page
    pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=True, maintenance=True,
                    maintenance_note="driver upgrade")
    page = client.get(reverse("pool-detail", args=[org.a100.pk])).content.decode()
    assert "in maintenance</strong> (driver upgrade), only system administrators may submit" in page
