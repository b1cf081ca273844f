"""Every page and API endpoint, called as each role and anonymously, against one table of who may.

The URL patterns are enumerated from the resolver when the test runs, so a page or endpoint added
later is covered too: one without a row in MATRIX fails `test_every_url_has_a_row` naming it.
Objects of department `rnd` (where the scoped roles live) and of department `ops` (where none of them
has a role) are both requested by id: cross-department access must be denied everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

# Each test in a transaction of its own, inside the module's (`world`, built once: `kept_db`).
pytestmark = pytest.mark.django_db

ROLES = ("sysadmin", "rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody")
EVERYONE = frozenset(ROLES)
SYSADMIN = frozenset({"sysadmin"})
IN_CLUSTER = EVERYONE - {"nobody"}                  # any role inside cluster `lab`
RND_READERS = frozenset({"sysadmin", "rnd_admin", "rnd_viewer", "cluster_viewer"})  # read department rnd
RND_A_READERS = RND_READERS | {"proj_admin", "researcher"}                           # read project rnd-a
OPS_READERS = frozenset({"sysadmin", "cluster_viewer"})                              # read department ops / ops-a
AUDITORS = frozenset({"sysadmin", "rnd_admin"})     # read (part of) the audit trail
RND_A_CHANGERS = frozenset({"sysadmin", "rnd_admin", "proj_admin"})
RND_MEMBER_MANAGERS = frozenset({"sysadmin", "rnd_admin"})
RND_A_SUBMITTERS = frozenset({"sysadmin", "rnd_admin", "proj_admin", "researcher"})  # submit / stop in rnd-a
NOBODY = frozenset()


@dataclass
class Case:
    allowed: frozenset                       # roles that get through (anonymous never does, unless public)
    kwargs: Callable[["World"], dict] = lambda w: {}
    method: str = "get"
    public: bool = False                     # anonymous users get through too
    label: str = ""
    data: Callable[["World"], dict] = lambda w: {}   # query (GET) or form (POST)
    to_login: bool = False                   # sends everyone to the login page by design
    anonymous: str | None = None             # what anonymous gets when not the default (machine endpoints)


@dataclass
class World:
    org: object
    users: dict
    objects: dict = field(default_factory=dict)

    def __getattr__(self, name):
        return self.objects[name]


def pk(name):
    return lambda w: {"pk": getattr(w, name).pk}


# URL name -> cases. Names without a namespace are pages; `api:` the REST API.
MATRIX: dict[str, list[Case]] = {
    # --- sign-in and account ---
    "home": [Case(EVERYONE)],
    "login": [Case(EVERYONE, public=True)],
    "favicon": [Case(EVERYONE, public=True)],
    "logout": [Case(NOBODY, method="post", to_login=True)],
    "admin-login-redirect": [Case(NOBODY, to_login=True)],
    "account-tokens": [Case(EVERYONE)],
    # Single sign-on: 404 while OIDC is not configured, as here (flows: tests/accounts/test_oidc.py).
    "oidc-login": [Case(NOBODY, anonymous="denied", label="SSO off")],
    "oidc-callback": [Case(NOBODY, anonymous="denied", label="SSO off")],
    # Probes and Prometheus: the probes are public; /metrics only with its bearer token (tests/test_health.py).
    "healthz": [Case(EVERYONE, public=True)],
    "readyz": [Case(EVERYONE, public=True)],
    "metrics": [Case(NOBODY, anonymous="denied", label="no metrics token")],
    "account-token-revoke": [Case(SYSADMIN, pk("sysadmin_token"), method="post", label="the sysadmin's own token")],
    "table-columns": [Case(EVERYONE, lambda w: {"table": "nodes"}, method="post")],
    # --- clusters, pools, nodes (pages) ---
    "cluster-switch": [Case(IN_CLUSTER, data=lambda w: {"cluster": w.cluster.pk})],
    "cluster-overview": [Case(IN_CLUSTER, pk("cluster"))],
    "pool-list": [Case(EVERYONE)],
    "pool-create": [Case(SYSADMIN)],
    "pool-detail": [Case(IN_CLUSTER, pk("a100"))],
    "pool-edit": [Case(SYSADMIN, pk("a100"))],
    "pool-delete": [Case(SYSADMIN, pk("a100"))],
    "pool-gpu-shape": [Case(SYSADMIN, pk("a100"))],
    # Karpenter-backed pools (provisioning): system administrators only (flows: tests/provisioning/).
    "provisioning-pool-create": [Case(SYSADMIN)],
    "provisioning-nodepool-edit": [Case(SYSADMIN, pk("a100"))],
    "provisioning-pool-delete": [Case(SYSADMIN, pk("a100"))],
    "node-list": [Case(EVERYONE)],
    "node-detail": [Case(IN_CLUSTER, pk("node"))],
    "node-move": [Case(SYSADMIN, pk("node"), method="post")],
    "cluster-enforcement": [Case(IN_CLUSTER, pk("cluster")),
                            Case(SYSADMIN, pk("cluster"), method="post", data=lambda w: {"enforcer": "none"},
                                 label="choose the enforcer")],
    # --- organisation (pages) ---
    "department-list": [Case(EVERYONE)],
    "my-projects": [Case(EVERYONE)],  # each sees the projects it holds a role in, none else
    "department-create": [Case(SYSADMIN)],
    "department-detail": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "department-edit": [Case(SYSADMIN, pk("rnd")), Case(SYSADMIN, pk("ops"), label="other department")],
    "department-members": [Case(RND_MEMBER_MANAGERS, pk("rnd"), method="post"),
                           Case(SYSADMIN, pk("ops"), method="post", label="other department")],
    "project-list": [Case(EVERYONE)],
    "project-create": [Case(RND_MEMBER_MANAGERS)],
    "project-detail": [Case(RND_A_READERS, pk("rnd_a")), Case(OPS_READERS, pk("ops_a"), label="other department")],
    "project-utilization": [Case(RND_A_READERS, pk("rnd_a")), Case(OPS_READERS, pk("ops_a"), label="other department")],
    "project-start-estimates": [Case(RND_A_READERS, pk("rnd_a")),
                                Case(OPS_READERS, pk("ops_a"), label="other department")],
    "department-utilization": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "project-utilization-chart": [Case(RND_A_READERS, pk("rnd_a")),
                                  Case(OPS_READERS, pk("ops_a"), label="other department")],
    "department-utilization-chart": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "project-edit": [Case(RND_A_CHANGERS, pk("rnd_a")), Case(SYSADMIN, pk("ops_a"), label="other department")],
    "project-members": [Case(RND_A_CHANGERS, pk("rnd_a"), method="post"),
                        Case(SYSADMIN, pk("ops_a"), method="post", label="other department")],
    "project-priority": [Case(RND_A_CHANGERS, pk("rnd_a"), method="post"),
                         Case(SYSADMIN, pk("ops_a"), method="post", label="other department")],
    "quota-grid": [Case(IN_CLUSTER, pk("cluster"))],
    "quota-edit": [Case(RND_A_READERS, pk("rnd_a_quota")), Case(OPS_READERS, pk("ops_a_quota"), label="other department")],
    # --- platforms, pod templates, rule sets (workloads; configured by system administrators) ---
    "platform-list": [Case(EVERYONE)],
    "platform-detail": [Case(IN_CLUSTER, pk("platform"))],
    "platform-edit": [Case(SYSADMIN, pk("platform"))],
    "platform-delete": [Case(SYSADMIN, pk("platform"))],
    "pool-platforms": [Case(IN_CLUSTER, pk("a100"))],
    "platform-create": [Case(SYSADMIN, pk("a100"))],
    "pool-workload-settings": [Case(SYSADMIN, pk("a100"))],
    "podtemplate-list": [Case(EVERYONE)],
    "podtemplate-create": [Case(SYSADMIN)],
    "podtemplate-detail": [Case(IN_CLUSTER, pk("pod_template"))],
    "podtemplate-edit": [Case(SYSADMIN, pk("pod_template"))],
    "podtemplate-delete": [Case(SYSADMIN, pk("pod_template"))],
    "ruleset-list": [Case(EVERYONE)],
    "ruleset-create": [Case(SYSADMIN)],
    "ruleset-detail": [Case(IN_CLUSTER, pk("rule_set"))],
    "ruleset-edit": [Case(SYSADMIN, pk("rule_set"))],
    "ruleset-delete": [Case(SYSADMIN, pk("rule_set"))],
    # --- workloads: the table, submitting, stopping, who may submit to a pool ---
    "workload-list": [Case(EVERYONE)],
    "workload-submit": [Case(RND_A_SUBMITTERS)],
    # The table's start estimates, fetched after the page: only of the workloads the user may see.
    "workload-start-estimates": [Case(RND_A_READERS, data=lambda w: {"ids": str(w.rnd_a_workload.pk)}),
                                 Case(OPS_READERS, data=lambda w: {"ids": str(w.ops_a_workload.pk)},
                                      label="other department")],
    "workload-detail": [Case(RND_A_READERS, pk("rnd_a_workload")),
                        Case(OPS_READERS, pk("ops_a_workload"), label="other department")],
    # A field of the submission form checked as it is filled (the project, pools and platform by default).
    "workload-submit-check": [Case(RND_A_SUBMITTERS, method="post", data=lambda w: {"project": w.rnd_a.pk})],
    # Allowed = past the access check (the cluster is unreachable here: the page then says so).
    "workload-stop": [Case(RND_A_SUBMITTERS, pk("rnd_a_workload"), method="post"),
                      Case(SYSADMIN, pk("ops_a_workload"), method="post", label="other department")],
    "pool-access": [Case(IN_CLUSTER, pk("a100")),
                    Case(SYSADMIN, pk("a100"), method="post", data=lambda w: {"open_to_cluster": "on"})],
    # --- audit trail and usage history (pages) ---
    "audit-events": [Case(AUDITORS)],
    "audit-export": [Case(AUDITORS)],
    "audit-event": [Case(AUDITORS, pk("rnd_event")), Case(SYSADMIN, pk("ops_event"), label="other department")],
    "usage-history": [Case(EVERYONE)],
    "usage-export": [Case(EVERYONE)],
    "usage-idle-gpus": [Case(EVERYONE)],
    # --- GPU-hours: statements (restricted like the quota), the hourly ledger, rates (system administrators) ---
    "statement-list": [Case(EVERYONE)],
    "department-statement": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department"),
                             Case(RND_READERS, pk("rnd"), data=lambda w: {"format": "csv"}, label="CSV")],
    "cluster-statement": [Case(SYSADMIN, pk("cluster")),
                          Case(SYSADMIN, pk("cluster"), data=lambda w: {"format": "csv"}, label="CSV")],
    "ledger-entries": [Case(EVERYONE)],
    "ledger-export": [Case(EVERYONE)],
    "rates": [Case(EVERYONE)],
    "rate-create": [Case(SYSADMIN)],
    "rate-edit": [Case(SYSADMIN, pk("rate"))],
    "rate-delete": [Case(SYSADMIN, pk("rate"))],
    # --- REST API (lists answer everyone logged in, with only what they may see) ---
    "api-schema": [Case(EVERYONE, public=True)],
    "api-docs": [Case(EVERYONE, public=True)],
    "api:cluster-list": [Case(EVERYONE)],
    "api:cluster-detail": [Case(IN_CLUSTER, pk("cluster"))],
    "api:nodepool-list": [Case(EVERYONE)],
    "api:nodepool-detail": [Case(IN_CLUSTER, pk("a100"))],
    "api:node-list": [Case(EVERYONE)],
    "api:node-detail": [Case(IN_CLUSTER, pk("node"))],
    "api:node-gpu-devices": [Case(IN_CLUSTER, pk("node"))],
    "api:nodepool-gpu-shape": [Case(SYSADMIN, pk("a100"), method="post", data=lambda w: {"mig_config": "all-1g.10gb"},
                                    label="dry run")],
    "api:node-move": [Case(SYSADMIN, pk("node"), method="post", data=lambda w: {"pool": w.a100.pk})],
    "api:cluster-enforcement": [Case(IN_CLUSTER, pk("cluster")),
                                Case(SYSADMIN, pk("cluster"), method="put", data=lambda w: {"enforcer": "none"},
                                     label="choose the enforcer")],
    "api:cluster-scheduler-queues": [Case(IN_CLUSTER, pk("cluster"))],
    "api:pool-provisioning": [Case(IN_CLUSTER, pk("a100"))],
    "api:nodepool-pending-gpu-pods": [Case(IN_CLUSTER, pk("a100"))],
    "api:nodepool-advice": [Case(IN_CLUSTER, pk("a100"))],
    "api:nodepool-fit": [Case(IN_CLUSTER, pk("a100")),
                         Case(IN_CLUSTER, pk("a100"), data=lambda w: {"pods": 2, "gpus": 4}, label="make room")],
    "api:cluster-fit": [Case(IN_CLUSTER, pk("cluster"))],
    "api:pod-provisioning": [
        Case(RND_A_READERS, lambda w: {"pk": w.cluster.pk, "namespace": "runai-rnd-a", "name": "rnd-a-waits"}),
        Case(OPS_READERS, lambda w: {"pk": w.cluster.pk, "namespace": "runai-ops-a", "name": "ops-a-waits"},
             label="other department")],
    "api:project-waiting": [Case(RND_A_READERS, pk("rnd_a")), Case(OPS_READERS, pk("ops_a"), label="other department")],
    "api:department-waiting": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "api:department-list": [Case(EVERYONE)],
    "api:department-detail": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "api:department-quotas": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "api:department-priority": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "api:department-utilization": [Case(RND_READERS, pk("rnd")),
                                   Case(OPS_READERS, pk("ops"), label="other department")],
    "api:project-list": [Case(EVERYONE)],
    "api:project-detail": [Case(RND_A_READERS, pk("rnd_a")), Case(OPS_READERS, pk("ops_a"), label="other department")],
    "api:project-quotas": [Case(RND_A_READERS, pk("rnd_a")), Case(OPS_READERS, pk("ops_a"), label="other department")],
    "api:project-priority": [Case(RND_A_READERS, pk("rnd_a")), Case(OPS_READERS, pk("ops_a"), label="other department")],
    "api:project-utilization": [Case(RND_A_READERS, pk("rnd_a")),
                                Case(OPS_READERS, pk("ops_a"), label="other department")],
    "api:quota-list": [Case(EVERYONE)],
    "api:quota-detail": [Case(RND_A_READERS, pk("rnd_a_quota")),
                         Case(OPS_READERS, pk("ops_a_quota"), label="other department")],
    "api:roleassignment-list": [Case(EVERYONE)],
    "api:roleassignment-detail": [Case(RND_A_CHANGERS, pk("rnd_a_role")),
                                  Case(SYSADMIN, pk("ops_a_role"), label="other department")],
    "api:auditevent-list": [Case(EVERYONE)],
    "api:auditevent-export": [Case(EVERYONE)],
    "api:auditevent-detail": [Case(AUDITORS, pk("rnd_event")), Case(SYSADMIN, pk("ops_event"), label="other department")],
    "api:workload-list": [Case(EVERYONE),
                          Case(RND_A_SUBMITTERS, method="post", label="dry-run submission to rnd-a",
                               data=lambda w: {"project": w.rnd_a.pk, "image": "busybox", "dry_run": True})],
    "api:workload-detail": [Case(RND_A_READERS, pk("rnd_a_workload")),
                            Case(OPS_READERS, pk("ops_a_workload"), label="other department")],
    "api:platform-list": [Case(EVERYONE)],
    "api:platform-detail": [Case(IN_CLUSTER, pk("platform"))],
    "api:podtemplate-list": [Case(EVERYONE)],
    "api:podtemplate-detail": [Case(IN_CLUSTER, pk("pod_template"))],
    "api:ruleset-list": [Case(EVERYONE)],
    "api:ruleset-detail": [Case(IN_CLUSTER, pk("rule_set"))],
    "api:usagesnapshot-list": [Case(EVERYONE)],
    "api:idle-gpus": [Case(EVERYONE)],
    "api:usagesnapshot-export": [Case(EVERYONE)],
    "api:usagesnapshot-detail": [Case(RND_A_READERS, pk("rnd_a_usage")),
                                 Case(OPS_READERS, pk("ops_a_usage"), label="other department")],
    "api:ledgerentry-list": [Case(EVERYONE)],
    "api:ledgerentry-export": [Case(EVERYONE)],
    "api:ledgerentry-detail": [Case(RND_A_READERS, pk("rnd_a_entry")),
                               Case(OPS_READERS, pk("ops_a_entry"), label="other department")],
    "api:department-statement": [Case(RND_READERS, pk("rnd")), Case(OPS_READERS, pk("ops"), label="other department")],
    "api:cluster-statement": [Case(SYSADMIN, pk("cluster"))],
    "api:rate-list": [Case(EVERYONE),
                      Case(SYSADMIN, method="post", label="add a rate",
                           data=lambda w: {"gpu_model": "Tesla-T4", "currency": "EUR", "valid_from": "2026-01-01",
                                           "gpu_hour": "0.35"})],
    "api:rate-detail": [Case(IN_CLUSTER, pk("rate")),
                        Case(SYSADMIN, pk("rate"), method="patch", data=lambda w: {"description": "checked"},
                             label="change a rate")],
}

# The Django admin is for staff accounts only (none of the roles above is staff); checked on its index.
EXEMPT_NAMESPACES = ("admin",)


def url_names() -> list[str]:
    names = []

    def walk(patterns, namespace):
        if namespace.split(":")[0] in EXEMPT_NAMESPACES:
            return
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = ":".join(filter(None, [namespace, pattern.namespace])) if pattern.namespace else namespace
                walk(pattern.url_patterns, inner)
            elif isinstance(pattern, URLPattern):
                name = f"{namespace}:{pattern.name}" if namespace and pattern.name else pattern.name
                names.append(name or f"<unnamed {pattern.pattern}>")

    walk(get_resolver().url_patterns, "")
    return sorted(set(names))


def test_every_url_has_a_row():
    missing = [name for name in url_names() if name not in MATRIX]
    assert not missing, (
        "These URL patterns have no row in tests/test_permission_matrix.py MATRIX, so nobody checks who may "
        f"call them; add one per pattern (allowed roles, kwargs): {missing}"
    )


def test_no_stale_rows():
    stale = sorted(set(MATRIX) - set(url_names()))
    assert not stale, f"MATRIX rows for URL names that no longer exist: {stale}"


@pytest.fixture(scope="module")
def world(kept_db):
    """The matrix's objects, built once for the module (`kept_db`: each test's changes are rolled back)."""
    with kept_db.unblock():
        return _world()


def _world():
    from nodepools import services as pool_services
    from tests.conftest import Org, role_users

    org = Org(pool_services.cluster_create(actor=None, name="lab"))
    users = role_users(org)
    from accounts.services import token_create
    from audit.models import AuditEvent
    from projects import services
    from access.rules import Role
    from access.models import RoleAssignment
    from usage.models import UsageSnapshot
    from usage.services import usage_snapshot_take

    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.default), expected_version=None, gpu_deserved=1)
    services.quota_update(actor=None, quota=org.quota(org.ops_a, org.default), expected_version=None, gpu_deserved=1)
    from tests.conftest import make_user

    # An ops-a member outside the matrix's roles, so that ops-a has a role assignment to ask for.
    ops_role = services.role_assign(actor=None, role=Role.RESEARCHER, user=make_user("ops-member"), project=org.ops_a)
    usage_snapshot_take()
    from decimal import Decimal

    from django.utils import timezone
    from ledger.models import LedgerEntry
    from ledger.services import rate_create

    def entry(project):
        return LedgerEntry.objects.create(hour=timezone.now().replace(minute=0, second=0, microsecond=0),
                                          recorded=timezone.now(), cluster_id=org.cluster.pk, pool=org.default,
                                          gpu_model="Tesla-V100-SXM2-16GB", department_id=project.department_id,
                                          project=project, gpu_seconds=Decimal(3600))

    ledger = {"rnd_a_entry": entry(org.rnd_a), "ops_a_entry": entry(org.ops_a),
              "rate": rate_create(actor=None, gpu_model="Tesla-V100-SXM2-16GB", currency="EUR",
                                  valid_from=timezone.now().date(), gpu_hour=Decimal("0.9"))}
    # Pending pods of rnd-a and ops-a (what Karpenter can do for them is read per pod).
    org.run("rnd-a-waits", org.rnd_a, None, phase="Pending")
    org.run("ops-a-waits", org.ops_a, None, phase="Pending")
    objects = {
        "cluster": org.cluster, "a100": org.a100, "node": org.cluster.nodes.get(name="a100-1"),
        "rnd": org.rnd, "ops": org.ops, "rnd_a": org.rnd_a, "ops_a": org.ops_a,
        "rnd_a_quota": org.quota(org.rnd_a, org.default), "ops_a_quota": org.quota(org.ops_a, org.default),
        "rnd_a_role": RoleAssignment.objects.get(project=org.rnd_a, role=Role.RESEARCHER),
        "ops_a_role": ops_role,
        "rnd_event": AuditEvent.objects.filter(object_type="quota", department_id=org.rnd.pk).first(),
        "ops_event": AuditEvent.objects.filter(object_type="quota", department_id=org.ops.pk).first(),
        "rnd_a_usage": UsageSnapshot.objects.filter(project=org.rnd_a).first(),
        "ops_a_usage": UsageSnapshot.objects.filter(project=org.ops_a).first(),
        "sysadmin_token": token_create(actor=users["sysadmin"], name="matrix")[0],
        **ledger,
    }
    from workloads import services as workload_services
    from workloads.models import ResourceValidationRuleSet

    objects["pod_template"] = workload_services.pod_template_create(actor=None, cluster=org.cluster, name="a100",
                                                                    body={"spec": {}})
    objects["platform"] = workload_services.platform_create(actor=None, pool=org.a100, name="a100-platform",
                                                            override_templates=["a100"])
    objects["rule_set"] = ResourceValidationRuleSet.objects.get(cluster=org.cluster, name="default_gpu")
    from workloads.models import Workload

    # Jobs as the sync mirrors them, in rnd-a's and ops-a's namespaces.
    objects["rnd_a_workload"] = Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="job-a")
    objects["ops_a_workload"] = Workload.objects.create(cluster=org.cluster, namespace="runai-ops-a", name="job-o")
    return World(org, users, objects)


def outcome(response, login_url="/login/") -> str:
    """'allowed', 'denied' (403/404) or 'login' (sent to log in / 401); anything else is reported as is."""
    code = response.status_code
    if code in (401,) or (code in (302, 303) and response.url.startswith(login_url)):
        return "login"
    if code in (403, 404):
        return "denied"
    if code < 400 or code in (400, 409, 412, 428):  # got past the access check to the request's own rules
        return "allowed"
    if code == 503:  # got past the access check; the cluster (which the matrix's `lab` has none of) was not read
        return "allowed"
    return f"status {code}"


def call(client, name, case, world):
    url = reverse(name, kwargs=case.kwargs(world))
    extra = {"content_type": "application/json"} if case.method in ("put", "patch") else {}
    response = getattr(client, case.method)(url, case.data(world), **extra)
    if hasattr(response, "streaming_content"):
        # Reading it to the end lets the test client close it (closing it here would close the database).
        b"".join(response)  # (an async stream: Django consumes it for the synchronous test client)
    return url, outcome(response)


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_permission_matrix(name, world, client):
    if name not in url_names():
        pytest.skip(f"{name} is not routed (see test_no_stale_rows)")
    wrong = []
    for case in MATRIX[name]:
        client.logout()
        url, got = call(client, name, case, world)
        expected = case.anonymous or ("allowed" if case.public and not case.to_login else "login")
        if got != expected:
            wrong.append(f"anonymous {case.method.upper()} {url}: expected {expected}, got {got}")
        for role in ROLES:
            client.force_login(world.users[role])
            url, got = call(client, name, case, world)
            expected = "login" if case.to_login else "allowed" if role in case.allowed else "denied"
            if got != expected:
                wrong.append(f"{role} {case.method.upper()} {url} {case.label}: expected {expected}, got {got}")
    assert not wrong, "\n".join(wrong)


# --- What each role sees of the scheduler's queues (issue 19: every department's queues showed) -----------

# Queue owner -> the roles that see it: a queue is its owner's (a department's or a project's), seen by whoever
# may see that owner (`restrict`); a queue the console does not own only by roles over the whole cluster.
QUEUE_READERS = {
    "department.rnd": RND_READERS,
    "department.ops": OPS_READERS,
    "project.rnd-a": RND_A_READERS,
    "project.rnd-b": RND_READERS,
    "project.ops-a": OPS_READERS,
    "": OPS_READERS,  # system administrator and the cluster's viewer
}


@pytest.fixture
def queues(world):
    from enforcers.models import SchedulerQueue

    org = world.org
    for owner in QUEUE_READERS:
        kind, _, name = owner.partition(".")
        SchedulerQueue.objects.create(cluster=org.cluster, kind="Queue", name=f"{name or 'foreign'}.a100" if kind != "department"
                                      else f"department.{name}.a100", pool=org.a100, owner=owner, gpu_allocated=1)
    return {q.owner: q.name for q in SchedulerQueue.objects.all()}


@pytest.mark.parametrize("role", ROLES)
def test_scheduler_queues_show_each_role_only_the_queues_of_what_it_may_see(world, queues, client, role):
    client.force_login(world.users[role])
    response = client.get(reverse("api:cluster-scheduler-queues", kwargs={"pk": world.cluster.pk}))
    if role == "nobody":
        assert response.status_code == 404
        return
    assert response.status_code == 200
    expected = sorted(queues[owner] for owner, readers in QUEUE_READERS.items() if role in readers)
    assert sorted(q["name"] for q in response.json()) == expected
    # The enforcement page shows the same queues (those with a quota row the role sees beside them).
    page = client.get(reverse("cluster-enforcement", kwargs={"pk": world.cluster.pk})).content.decode()
    for owner, name in queues.items():
        if owner and role not in QUEUE_READERS[owner]:
            assert f"Queue {name}<" not in page, (role, name)


def test_admin_is_for_staff_only(client, world):
    for role in ROLES:
        client.force_login(world.users[role])
        response = client.get("/admin/")
        assert response.status_code == 302 and "login" in response.url, role
