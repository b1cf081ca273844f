"""Each role sees and changes exactly its scope (docs/concepts.md#roles), through the one choke point `restrict`."""
import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied, ValidationError

from nodepools import services as pool_services
from nodepools.models import Cluster, Node, NodePool, Pod
from projects import services
from access.rules import Role
from projects.models import Department, Project, Quota
from access.models import RoleAssignment
from tests.conftest import make_user


def names(qs):
    return sorted(str(obj) for obj in qs)


def quota_owners(qs):
    return sorted(f"{q.owner}@{q.pool}" for q in qs)


@pytest.fixture
def second_cluster(db):
    other = pool_services.cluster_create(actor=None, name="other")
    department = services.department_create(actor=None, cluster=other, name="far")
    services.project_create(actor=None, department=department, name="far-a")
    return other


@pytest.fixture
def pods(org):
    org.run("a-train", org.rnd_a, "v100-1")
    org.run("b-train", org.rnd_b, "v100-1")
    org.run("o-infer", org.ops_a, "a100-1", priority=125)
    return org


ALL_DEPARTMENTS = ["far", "ops", "rnd"]
ALL_PROJECTS = ["far-a", "ops-a", "rnd-a", "rnd-b"]
LAB_PROJECTS = ["ops-a", "rnd-a", "rnd-b"]

CLUSTER_WIDE = {"sysadmin", "cluster_viewer"}
# role -> (clusters, departments, projects, pods) it may view
VISIBLE = {
    "sysadmin": (["lab", "other"], ALL_DEPARTMENTS, ALL_PROJECTS, ["runai-ops-a/o-infer", "runai-rnd-a/a-train", "runai-rnd-b/b-train"]),
    "cluster_viewer": (["lab"], ["ops", "rnd"], LAB_PROJECTS, ["runai-ops-a/o-infer", "runai-rnd-a/a-train", "runai-rnd-b/b-train"]),
    "rnd_admin": (["lab"], ["rnd"], ["rnd-a", "rnd-b"], ["runai-rnd-a/a-train", "runai-rnd-b/b-train"]),
    "rnd_viewer": (["lab"], ["rnd"], ["rnd-a", "rnd-b"], ["runai-rnd-a/a-train", "runai-rnd-b/b-train"]),
    "proj_admin": (["lab"], [], ["rnd-a"], ["runai-rnd-a/a-train"]),
    "researcher": (["lab"], [], ["rnd-a"], ["runai-rnd-a/a-train"]),
    "nobody": ([], [], [], []),
}


@pytest.mark.parametrize("role", sorted(VISIBLE))
def test_each_role_sees_exactly_its_scope(pods, users, second_cluster, role):
    user = users[role]
    clusters, departments, projects, pod_names = VISIBLE[role]
    assert names(Cluster.objects.restrict(user, "view")) == clusters
    assert names(Department.objects.restrict(user, "view")) == departments
    assert names(Project.objects.restrict(user, "view")) == projects
    if role in CLUSTER_WIDE:
        # Pods outside every project (the NVIDIA operands) are for cluster-wide roles only.
        pod_names = sorted(pod_names + names(Pod.objects.filter(project__isnull=True)))
    assert names(Pod.objects.restrict(user, "view")) == pod_names
    # Pools and nodes are cluster-wide: visible to anyone with a role inside the cluster.
    expected_pools = sorted(str(p) for p in NodePool.objects.filter(cluster__name__in=clusters))
    assert names(NodePool.objects.restrict(user, "view")) == expected_pools
    assert Node.objects.restrict(user, "view").count() == (4 if "lab" in clusters else 0)
    # Quota rows: those of visible departments and visible projects.
    owners = set(departments) | set(projects)
    expected_quota = sorted(f"{q.owner}@{q.pool}" for q in Quota.objects.all() if str(q.owner) in owners)
    assert quota_owners(Quota.objects.restrict(user, "view")) == expected_quota


CHANGEABLE_QUOTA = {
    "sysadmin": "all",
    "rnd_admin": ["rnd-a@a100", "rnd-a@default", "rnd-b@a100", "rnd-b@default"],  # its projects, not itself
    "rnd_viewer": [],
    "proj_admin": [],
    "researcher": [],
    "cluster_viewer": [],
    "nobody": [],
}


@pytest.mark.parametrize("role", sorted(CHANGEABLE_QUOTA))
def test_who_may_change_which_quota(org, users, role):
    expected = CHANGEABLE_QUOTA[role]
    if expected == "all":
        expected = quota_owners(Quota.objects.all())
    assert quota_owners(Quota.objects.restrict(users[role], "change")) == expected


def test_quota_service_refuses_writes_outside_the_role(org, users):
    with pytest.raises(PermissionDenied):
        services.quota_update(actor=users["rnd_admin"], quota=org.quota(org.rnd, org.default), expected_version=1, gpu_deserved=100)
    with pytest.raises(PermissionDenied):
        services.quota_update(actor=users["rnd_admin"], quota=org.quota(org.ops_a, org.default), expected_version=1, gpu_deserved=1)
    with pytest.raises(PermissionDenied):
        services.quota_update(actor=users["researcher"], quota=org.quota(org.rnd_a, org.default), expected_version=1, gpu_deserved=1)
    result = services.quota_update(actor=users["rnd_admin"], quota=org.quota(org.rnd_a, org.default), expected_version=1,
                                   gpu_deserved=1)
    assert result.quota.gpu_deserved == 1


CHANGEABLE_PROJECTS = {
    "sysadmin": LAB_PROJECTS, "rnd_admin": ["rnd-a", "rnd-b"], "proj_admin": ["rnd-a"], "rnd_viewer": [],
    "researcher": [], "cluster_viewer": [], "nobody": [],
}


@pytest.mark.parametrize("role", sorted(CHANGEABLE_PROJECTS))
def test_who_may_change_which_project(org, users, role):
    assert names(Project.objects.restrict(users[role], "change")) == CHANGEABLE_PROJECTS[role]


def test_department_admin_adds_projects_only_to_its_departments(org, users):
    admin = users["rnd_admin"]
    project = services.project_create(actor=admin, department=org.rnd, name="rnd-c")
    assert project.quotas.count() == 2
    with pytest.raises(PermissionDenied):
        services.project_create(actor=admin, department=org.ops, name="ops-b")
    with pytest.raises(PermissionDenied):
        services.project_create(actor=users["proj_admin"], department=org.rnd, name="rnd-d")


def test_department_admin_manages_members_of_its_departments_only(org, users):
    admin = users["rnd_admin"]
    newcomer = make_user("newcomer")
    services.role_assign(actor=admin, role=Role.RESEARCHER, user=newcomer, project=org.rnd_b)
    services.role_assign(actor=admin, role=Role.DEPARTMENT_VIEWER, user=newcomer, department=org.rnd)
    with pytest.raises(PermissionDenied):
        services.role_assign(actor=admin, role=Role.RESEARCHER, user=newcomer, project=org.ops_a)
    with pytest.raises(PermissionDenied):
        services.role_assign(actor=admin, role=Role.SYSTEM_ADMIN, user=newcomer)
    visible = RoleAssignment.objects.restrict(admin, "view")
    assert {str(a.subject) for a in visible} == {"rnd-admin", "rnd-viewer", "proj-admin", "researcher", "newcomer"}


def test_project_admin_manages_members_of_its_project_only(org, users):
    newcomer = make_user("newcomer")
    services.role_assign(actor=users["proj_admin"], role=Role.RESEARCHER, user=newcomer, project=org.rnd_a)
    with pytest.raises(PermissionDenied):
        services.role_assign(actor=users["proj_admin"], role=Role.RESEARCHER, user=newcomer, project=org.rnd_b)
    with pytest.raises(PermissionDenied):
        services.role_assign(actor=users["researcher"], role=Role.RESEARCHER, user=newcomer, project=org.rnd_a)


def test_roles_through_groups_count(org):
    member = make_user("member")
    group = Group.objects.create(name="ops-team")
    member.groups.add(group)
    services.role_assign(actor=None, role=Role.DEPARTMENT_VIEWER, group=group, department=org.ops)
    assert names(Project.objects.restrict(member, "view")) == ["ops-a"]


def test_role_must_fit_its_scope(org):
    with pytest.raises(ValidationError) as exc:
        services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=make_user("x"), department=org.rnd)
    assert "scope_type" in exc.value.message_dict
    with pytest.raises(ValidationError):
        services.role_assign(actor=None, role=Role.DEPARTMENT_ADMIN, user=make_user("y"), project=org.rnd_a)


def test_inactive_and_anonymous_users_see_nothing(org, users):
    from django.contrib.auth.models import AnonymousUser

    users["sysadmin"].is_active = False
    assert not Cluster.objects.restrict(users["sysadmin"], "view").exists()
    assert not NodePool.objects.restrict(AnonymousUser(), "view").exists()
