"""Pages of departments and projects: lists, pages, create and edit, members, priority lists, and the
department manager's view (deserved, allocated, over-quota and fair share per pool)."""
import pytest
from django.urls import reverse

from access.rules import Role
from projects.models import Department, Project
from access.models import RoleAssignment
from tests.pages import ROLES, first_column, login, page_text, table_rows

DEPARTMENT_SEERS = {"sysadmin", "rnd_admin", "rnd_viewer", "cluster_viewer"}
PROJECT_SEERS = {"sysadmin", "rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer"}


# --- Lists -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("role", ROLES)
def test_department_list_per_role(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("department-list"), {"sort": "name"})
    assert response.status_code == 200
    expected = {"sysadmin": ["ops", "rnd"], "cluster_viewer": ["ops", "rnd"], "rnd_admin": ["rnd"],
                "rnd_viewer": ["rnd"]}.get(role, [])
    assert first_column(response) == expected
    assert ("Add department" in page_text(response)) == (role == "sysadmin")


@pytest.mark.parametrize("role", ROLES)
def test_project_list_per_role(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("project-list"), {"sort": "name"})
    assert response.status_code == 200
    expected = {"sysadmin": ["ops-a", "rnd-a", "rnd-b"], "cluster_viewer": ["ops-a", "rnd-a", "rnd-b"],
                "rnd_admin": ["rnd-a", "rnd-b"], "rnd_viewer": ["rnd-a", "rnd-b"], "proj_admin": ["rnd-a"],
                "researcher": ["rnd-a"]}.get(role, [])
    assert first_column(response) == expected
    assert ("Add project" in page_text(response)) == (role in ("sysadmin", "rnd_admin"))


def test_project_list_shows_namespaces_quota_and_workloads(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=2)
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "sysadmin")
    from tests.pages import headers

    response = client.get(reverse("project-list"), {"department": org.rnd.pk, "sort": "name"})
    # project, department, cluster, namespaces, deserved per pool, allocated per pool, workloads, over-quota allowed
    assert table_rows(response) == [
        ["rnd-a", "rnd", "lab", "runai-rnd-a", "a100 2 · default 0", "a100 3 · default 0", "1", "✔"],
        ["rnd-b", "rnd", "lab", "runai-rnd-b", "a100 0 · default 0", "a100 0 · default 0", "0", "✔"]]
    assert headers(response)[4:6] == ["Deserved GPUs per pool", "Allocated GPUs per pool"]


def test_lists_never_add_gpus_of_different_pools_into_one_number(client, org, users):
    from projects import services
    from tests.pages import csv_of

    for owner, pool, gpus in [(org.rnd, org.a100, 4), (org.rnd, org.default, 6), (org.rnd_a, org.a100, 4),
                              (org.rnd_a, org.default, 1), (org.rnd_b, org.default, 5)]:
        services.quota_update(actor=None, quota=org.quota(owner, pool), expected_version=None, gpu_deserved=gpus)
    org.run("train-a", org.rnd_a, "a100-1", gpus=3)
    org.run("train-b", org.rnd_b, "v100-1", gpus=2)
    org.run("train-c", org.rnd_a, "v100-2", gpus=1)
    login(client, users, "rnd_admin")
    departments = client.get(reverse("department-list"), {"sort": "name"})
    # department, cluster, projects, deserved per pool, allocated per pool (its projects' pods), description
    assert table_rows(departments) == [["rnd", "lab", "2", "a100 4 · default 6", "a100 3 · default 3", ""]]
    projects = {r[0]: r[4:6] for r in table_rows(client.get(reverse("project-list"), {"sort": "name"}))}
    assert projects == {"rnd-a": ["a100 4 · default 1", "a100 3 · default 1"],
                        "rnd-b": ["a100 0 · default 5", "a100 0 · default 2"]}
    # Exactly these cells: no cross-pool total (rnd's 10 deserved / 6 allocated) in any column.
    assert "all pools" not in page_text(departments)
    # The CSV says the same, per pool.
    rows = csv_of(client.get(reverse("department-list"), {"sort": "name", "format": "csv"}))
    assert rows[0][3:5] == ["Deserved GPUs per pool", "Allocated GPUs per pool"]
    assert rows[1][3:5] == ["a100 4 · default 6", "a100 3 · default 3"]
    rows = csv_of(client.get(reverse("project-list"), {"sort": "name", "format": "csv"}))
    assert [r[4:6] for r in rows[1:]] == [["a100 4 · default 1", "a100 3 · default 1"],
                                          ["a100 0 · default 5", "a100 0 · default 2"]]


# --- Department pages ------------------------------------------------------------------------------

@pytest.mark.parametrize("role", ROLES)
def test_department_page_per_role(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("department-detail", args=[org.rnd.pk]))
    assert response.status_code == (200 if role in DEPARTMENT_SEERS else 404)
    # Nothing of another department is reachable by URL for the rnd roles.
    other = client.get(reverse("department-detail", args=[org.ops.pk]))
    assert other.status_code == (200 if role in ("sysadmin", "cluster_viewer") else 404)


def test_department_manager_sees_deserved_allocated_over_quota_and_fair_share(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=4)
    services.quota_update(actor=None, quota=org.quota(org.ops, org.a100), expected_version=None, gpu_deserved=4)
    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=2)
    services.quota_update(actor=None, quota=org.quota(org.rnd_b, org.a100), expected_version=None, gpu_deserved=2)
    org.run("train-1", org.rnd_a, "a100-1", gpus=4)
    org.run("train-2", org.rnd_a, "a100-2", gpus=2)
    login(client, users, "rnd_viewer")
    rows = table_rows(client.get(reverse("department-detail", args=[org.rnd.pk])), "department-summary")
    # a100 has 8 ready GPUs. ops wants nothing, so rnd (asking 6) gets all 6; rnd-a takes them.
    start = next(i for i, r in enumerate(rows) if r[0].startswith("a100"))
    a100 = rows[start:start + 3]
    assert a100 == [
        ["a100 8 ready GPUs", "rnd", "4", "6", "2", "6"],
        ["rnd-a", "2", "6", "4", "6"],
        ["rnd-b", "2", "0", "0", "0"],
    ]
    assert "ops" not in page_text(client.get(reverse("department-detail", args=[org.rnd.pk])))


def test_department_page_lists_members_and_manages_them(client, org, users):
    from tests.conftest import make_user

    newcomer = make_user("newcomer")
    login(client, users, "rnd_admin")
    url = reverse("department-members", args=[org.rnd.pk])
    response = client.post(url, {"username": "newcomer", "role": Role.DEPARTMENT_VIEWER}, follow=True)
    assert "newcomer is Department viewer of rnd" in page_text(response)
    members = {tuple(r[:2]) for r in table_rows(response, "members")}
    assert ("newcomer", "Department viewer") in members and ("rnd-admin", "Department administrator") in members
    assignment = RoleAssignment.objects.get(user=newcomer)
    response = client.post(url, {"remove": assignment.pk}, follow=True)
    assert not RoleAssignment.objects.filter(user=newcomer).exists()
    response = client.post(url, {"username": "ghost", "role": Role.VIEWER}, follow=True)
    assert "Username: No active user named 'ghost'." in page_text(response)


@pytest.mark.parametrize("role", ["rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody"])
def test_members_of_a_department_cannot_be_changed_without_the_right(client, org, users, role):
    login(client, users, role)
    response = client.post(reverse("department-members", args=[org.rnd.pk]),
                           {"username": "nobody", "role": Role.DEPARTMENT_ADMIN})
    assert response.status_code == 404
    assert not RoleAssignment.objects.filter(user=users["nobody"]).exists()


def test_rnd_admin_cannot_manage_members_of_another_department(client, org, users):
    login(client, users, "rnd_admin")
    response = client.post(reverse("department-members", args=[org.ops.pk]),
                           {"username": "nobody", "role": Role.DEPARTMENT_ADMIN})
    assert response.status_code == 404


def test_create_and_edit_departments_are_for_system_administrators(client, org, users):
    for role in ["rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody"]:
        login(client, users, role)
        assert client.get(reverse("department-create")).status_code == 403
        assert client.post(reverse("department-create"), {"cluster": org.cluster.pk, "name": "x"}).status_code == 403
        assert client.post(reverse("department-edit", args=[org.rnd.pk]), {"name": "y"}).status_code == 403
    login(client, users, "sysadmin")
    response = client.post(reverse("department-create"), {"cluster": org.cluster.pk, "name": "vision"})
    department = Department.objects.get(name="vision")
    assert response.url == reverse("department-detail", args=[department.pk])
    assert department.quotas.count() == 2  # a zero row in each pool
    response = client.post(reverse("department-edit", args=[department.pk]), {"name": "Vision!", "description": ""})
    assert ("Kubernetes name: Use lowercase letters, digits and '-'; start and end with a letter or digit; at most 63 characters "
            "(“Vision!” holds capital letters and '!').") in page_text(response)
    response = client.post(reverse("department-edit", args=[department.pk]), {"name": "cv", "description": "CV"})
    department.refresh_from_db()
    assert (department.name, department.description) == ("cv", "CV")


# --- Project pages ---------------------------------------------------------------------------------

@pytest.mark.parametrize("role", ROLES)
def test_project_page_per_role(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("project-detail", args=[org.rnd_a.pk]))
    assert response.status_code == (200 if role in PROJECT_SEERS else 404)
    other = client.get(reverse("project-detail", args=[org.ops_a.pk]))
    assert other.status_code == (200 if role in ("sysadmin", "cluster_viewer") else 404)
    edit = client.get(reverse("project-edit", args=[org.rnd_a.pk]))
    assert edit.status_code == (200 if role in ("sysadmin", "rnd_admin", "proj_admin") else 404)


def test_project_page_shows_quota_per_pool_with_fair_share(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=4)
    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=1)
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "researcher")
    rows = table_rows(client.get(reverse("project-detail", args=[org.rnd_a.pk])), "project-summary")
    # pool, deserved, limit, allocated, over quota, fair share, weight, rank
    assert rows == [["default", "0", "—", "0", "0", "0", "2", "Medium low"],
                    ["a100", "1", "—", "3", "2", "3", "2", "Medium low"]]


def test_create_a_project_as_department_administrator(client, org, users):
    login(client, users, "rnd_admin")
    page = client.get(reverse("project-create")).content.decode()
    assert f'<option value="{org.rnd.pk}"' in page and f'<option value="{org.ops.pk}"' not in page
    response = client.post(reverse("project-create"), {"department": org.rnd.pk, "name": "rnd-c",
                                                       "allow_over_quota": "on", "namespaces": ""})
    project = Project.objects.get(name="rnd-c")
    assert response.url == reverse("project-detail", args=[project.pk])
    assert list(project.namespaces.values_list("name", flat=True)) == ["runai-rnd-c"]
    # Not into another department.
    response = client.post(reverse("project-create"), {"department": org.ops.pk, "name": "sneaky"})
    assert "Select a valid choice" in page_text(response) and not Project.objects.filter(name="sneaky").exists()


def test_project_create_is_refused_to_those_who_may_not_add(client, org, users):
    for role in ["rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody"]:
        login(client, users, role)
        assert client.get(reverse("project-create")).status_code == 403


def test_edit_a_project_and_its_namespaces(client, org, users):
    login(client, users, "proj_admin")
    response = client.post(reverse("project-edit", args=[org.rnd_a.pk]), {
        "name": "rnd-a", "description": "Vision", "namespaces": "runai-rnd-a, rnd-a-extra",
    })
    assert response.status_code == 302
    org.rnd_a.refresh_from_db()
    assert org.rnd_a.description == "Vision" and org.rnd_a.allow_over_quota is False
    assert sorted(org.rnd_a.namespaces.values_list("name", flat=True)) == ["rnd-a-extra", "runai-rnd-a"]
    response = client.post(reverse("project-edit", args=[org.rnd_a.pk]), {"name": "rnd-a", "namespaces": "runai-rnd-b"})
    assert "Namespace 'runai-rnd-b' already belongs to project 'rnd-b'." in page_text(response)


def test_project_members(client, org, users):
    login(client, users, "proj_admin")
    url = reverse("project-members", args=[org.rnd_a.pk])
    response = client.post(url, {"username": "nobody", "role": Role.RESEARCHER}, follow=True)
    assert ("nobody", "Researcher") in {tuple(r[:2]) for r in table_rows(response, "members")}
    login(client, users, "researcher")
    assert client.post(url, {"username": "nobody", "role": Role.PROJECT_ADMIN}).status_code == 404


def test_project_priority_list_can_be_built_and_reordered(client, org, users):
    login(client, users, "rnd_admin")
    url = reverse("project-priority", args=[org.rnd_a.pk])
    client.post(url, {"add": org.default.pk})
    client.post(url, {"pools": [org.default.pk], "add": org.a100.pk})
    assert [e.pool.name for e in org.rnd_a.priority_entries.order_by("position")] == ["default", "a100"]
    client.post(url, {"pools": [org.default.pk, org.a100.pk], "move": f"up:{org.a100.pk}"})
    assert [e.pool.name for e in org.rnd_a.priority_entries.order_by("position")] == ["a100", "default"]
    page = client.get(reverse("project-detail", args=[org.rnd_a.pk]))
    assert "a100 ↑ ↓ Remove default ↑ ↓ Remove" in page_text(page)
    client.post(url, {"pools": [org.a100.pk, org.default.pk], "remove": org.default.pk})
    assert [e.pool.name for e in org.rnd_a.priority_entries.order_by("position")] == ["a100"]


def test_project_priority_is_refused_without_change_right(client, org, users):
    for role in ["rnd_viewer", "researcher", "cluster_viewer", "nobody"]:
        login(client, users, role)
        assert client.post(reverse("project-priority", args=[org.rnd_a.pk]), {"add": org.a100.pk}).status_code == 404
    assert not org.rnd_a.priority_entries.exists()
