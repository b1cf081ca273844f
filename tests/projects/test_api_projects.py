"""Departments, projects, priority lists and role assignments over the REST API."""
import pytest

from audit.models import AuditEvent
from projects.models import Project
from access.models import RoleAssignment


def names(response):
    assert response.status_code == 200, response.content
    return [row["name"] for row in response.json()["results"]]


def test_each_role_lists_only_the_projects_it_may_see(api, org, users):
    expected = {
        "sysadmin": ["ops-a", "rnd-a", "rnd-b"],
        "rnd_admin": ["rnd-a", "rnd-b"],
        "rnd_viewer": ["rnd-a", "rnd-b"],
        "proj_admin": ["rnd-a"],
        "researcher": ["rnd-a"],
        "cluster_viewer": ["ops-a", "rnd-a", "rnd-b"],
        "nobody": [],
    }
    for role, projects in expected.items():
        assert names(api(users[role]).get("/api/v1/projects/", {"ordering": "name"})) == projects, role


def test_cross_department_access_by_id_is_404(api, org, users):
    client = api(users["rnd_admin"])
    for url in (f"/api/v1/projects/{org.ops_a.pk}/", f"/api/v1/departments/{org.ops.pk}/",
                f"/api/v1/projects/{org.ops_a.pk}/quotas/", f"/api/v1/departments/{org.ops.pk}/quotas/",
                f"/api/v1/projects/{org.ops_a.pk}/priority/"):
        assert client.get(url).status_code == 404, url
    assert client.patch(f"/api/v1/projects/{org.ops_a.pk}/", {"description": "x"}, format="json").status_code == 404
    assert client.delete(f"/api/v1/projects/{org.ops_a.pk}/").status_code == 404
    quota = org.quota(org.ops_a, org.default)
    assert client.get(f"/api/v1/quotas/{quota.pk}/").status_code == 404
    # Naming another department's object in a body is refused like an unknown id.
    response = client.post("/api/v1/projects/", {"department": org.ops.pk, "name": "sneak"}, format="json")
    assert response.status_code == 400 and "department" in response.json()["errors"]


def test_department_admin_creates_updates_and_deletes_a_project(api, org, users):
    client = api(users["rnd_admin"])
    response = client.post("/api/v1/projects/", {"department": org.rnd.pk, "name": "rnd-c", "namespaces": ["team-c"]},
                           format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["cluster"], body["namespaces"]) == ("rnd-c", org.cluster.pk, ["team-c"])
    pk = body["id"]
    response = client.patch(f"/api/v1/projects/{pk}/", {"allow_over_quota": False, "namespaces": ["team-c", "team-c2"]},
                            format="json")
    assert response.status_code == 200
    assert (response.json()["allow_over_quota"], response.json()["namespaces"]) == (False, ["team-c", "team-c2"])
    assert client.delete(f"/api/v1/projects/{pk}/").status_code == 204
    assert not Project.objects.filter(pk=pk).exists()
    recorded = AuditEvent.objects.filter(object_type="project", object_id=str(pk)).order_by("pk")
    assert [(e.action, e.via) for e in recorded] == [("create", "api"), ("update", "api"), ("update", "api"),
                                                      ("delete", "api")]


def test_bad_project_name_names_the_field_and_rule(api, org, users):
    response = api(users["rnd_admin"]).post("/api/v1/projects/", {"department": org.rnd.pk, "name": "Bad_Name"},
                                            format="json")
    assert response.status_code == 400
    assert "name" in response.json()["errors"]
    assert response.json()["errors"]["name"] == [
        "Use lowercase letters, digits and '-'; start and end with a letter or digit; at most 63 characters "
        "(“Bad_Name” holds capital letters and '_')."]
    assert "regex" not in response.json()["detail"] and response.json()["detail"].startswith("Invalid input: name: Use")


def test_duplicate_project_name_is_a_400_naming_the_rule(api, org, users):
    response = api(users["rnd_admin"]).post("/api/v1/projects/", {"department": org.rnd.pk, "name": "rnd-a"},
                                            format="json")
    assert response.status_code == 400
    assert "already exists" in str(response.json()["errors"])


# A researcher cannot even see the department (400: not a department it may name); a viewer sees it (403).
@pytest.mark.parametrize("role, create_status", [("rnd_viewer", 403), ("researcher", 400)])
def test_readers_cannot_change_projects(api, org, users, role, create_status):
    client = api(users[role])
    assert client.patch(f"/api/v1/projects/{org.rnd_a.pk}/", {"description": "x"}, format="json").status_code == 403
    assert client.delete(f"/api/v1/projects/{org.rnd_a.pk}/").status_code == 403
    response = client.post("/api/v1/projects/", {"department": org.rnd.pk, "name": "x"}, format="json")
    assert response.status_code == create_status
    assert not org.rnd.projects.filter(name="x").exists()


def test_departments_are_written_by_system_admins(api, org, users):
    admin = api(users["sysadmin"])
    response = admin.post("/api/v1/departments/", {"cluster": org.cluster.pk, "name": "infra"}, format="json")
    assert response.status_code == 201
    pk = response.json()["id"]
    assert admin.patch(f"/api/v1/departments/{pk}/", {"description": "Infra"}, format="json").json()["description"] == "Infra"
    assert api(users["rnd_admin"]).patch(f"/api/v1/departments/{org.rnd.pk}/", {"description": "x"},
                                         format="json").status_code == 403
    # A department with projects is kept: 400 naming why.
    response = admin.delete(f"/api/v1/departments/{org.rnd.pk}/")
    assert response.status_code == 400 and "still has 2 projects: move or delete them first." in response.json()["detail"]
    assert admin.delete(f"/api/v1/departments/{pk}/").status_code == 204


def test_project_priority_list_round_trip(api, org, users):
    client = api(users["proj_admin"])
    url = f"/api/v1/projects/{org.rnd_a.pk}/priority/"
    assert client.get(url).json() == {"pools": []}
    response = client.put(url, {"pools": [org.a100.pk, org.default.pk]}, format="json")
    assert response.status_code == 200 and response.json() == {"pools": [org.a100.pk, org.default.pk]}
    assert client.get(f"/api/v1/projects/{org.rnd_a.pk}/").json()["priority"] == [org.a100.pk, org.default.pk]
    response = client.put(url, {"pools": [org.a100.pk, org.a100.pk]}, format="json")
    assert response.status_code == 400 and "only once" in response.json()["errors"]["pools"][0]
    response = client.put(url, {"pools": [999999]}, format="json")
    assert response.status_code == 400 and "999999" in response.json()["errors"]["pools"][0]


def test_role_assignments_managed_within_scope(api, org, users):
    from tests.conftest import make_user

    make_user("newcomer")
    client = api(users["rnd_admin"])
    response = client.post("/api/v1/role-assignments/", {"user": "newcomer", "role": "researcher", "project": org.rnd_b.pk},
                           format="json")
    assert response.status_code == 201, response.content
    assert response.json()["scope_type"] == "project"
    pk = response.json()["id"]
    # Outside its departments: the project is not even visible.
    response = client.post("/api/v1/role-assignments/", {"user": "newcomer", "role": "researcher", "project": org.ops_a.pk},
                           format="json")
    assert response.status_code == 400 and "project" in response.json()["errors"]
    # A system-wide role is for system administrators.
    response = client.post("/api/v1/role-assignments/", {"user": "newcomer", "role": "viewer"}, format="json")
    assert response.status_code == 403
    assert client.delete(f"/api/v1/role-assignments/{pk}/").status_code == 204
    assert not RoleAssignment.objects.filter(pk=pk).exists()
    recorded = AuditEvent.objects.filter(object_type="roleassignment", object_id=str(pk)).order_by("pk")
    assert [(e.action, e.via, e.actor_name) for e in recorded] == [("create", "api", "rnd-admin"),
                                                                   ("delete", "api", "rnd-admin")]


def test_role_assignment_errors_name_the_field(api, org, users):
    client = api(users["sysadmin"])
    response = client.post("/api/v1/role-assignments/", {"user": "ghost", "role": "viewer"}, format="json")
    assert response.status_code == 400 and "user" in response.json()["errors"]
    response = client.post("/api/v1/role-assignments/", {"user": "nobody", "role": "department_admin",
                                                         "project": org.rnd_a.pk}, format="json")
    assert response.status_code == 400 and "scope_type" in response.json()["errors"]


def test_researcher_sees_own_project_role_assignments_only(api, org, users):
    rows = api(users["researcher"]).get("/api/v1/role-assignments/").json()["results"]
    assert rows == []  # researchers hold no roleassignment.view
    rows = api(users["proj_admin"]).get("/api/v1/role-assignments/").json()["results"]
    assert {row["project"] for row in rows} == {org.rnd_a.pk}


def test_a_department_with_one_project_says_it_in_the_singular(api, org, users):
    admin = api(users["sysadmin"])
    department = admin.post("/api/v1/departments/", {"cluster": org.cluster.pk, "name": "solo"}, format="json").json()
    assert admin.post("/api/v1/projects/", {"department": department["id"], "name": "solo-a"},
                      format="json").status_code == 201
    response = admin.delete(f"/api/v1/departments/{department['id']}/")
    assert response.status_code == 400
    assert "Department 'solo' still has 1 project: move or delete it first." in response.json()["detail"]
