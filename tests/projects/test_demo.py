"""The demo organisation (docs/getting-started.md#what-the-demo-is), loaded idempotently, with one login per role."""
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from nodepools.models import Node, NodePool, NodeStatus
from access.rules import Role
from projects.models import Department, Project, Quota
from access.models import RoleAssignment


def load():
    out = StringIO()
    call_command("demo", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_demo_builds_the_seed_organisation():
    output = load()
    pools = {p.name: p for p in NodePool.objects.with_capacity()}
    assert {name: (p.node_count, p.gpu_total) for name, p in pools.items()} == {
        "default": (20, 80), "a100-40gb": (5, 20), "a100-80gb": (5, 20),
        # The pools of shared GPUs count physical GPUs in GPU-equivalents: MIG slices, replicas, fractions.
        "a100-mig": (3, 12), "l4-shared": (3, 12), "a10g": (2, 8)}
    assert set(Node.objects.filter(pool__name="a100-80gb").values_list("gpu_product", flat=True)) == {"NVIDIA-A100-SXM4-80GB"}
    assert {d.name: sorted(d.projects.values_list("name", flat=True)) for d in Department.objects.all()} == {
        "rnd": ["team-nlp", "team-robotics", "team-speech", "team-vision"],
        "ml-ops": ["batch-scoring", "serve-chat", "serve-search", "serve-vision"],
    }
    for department in Department.objects.all():
        assert department.quotas.get(pool__name="default").gpu_deserved == Decimal(20)
    # Some nodes are not ready, each for another reason.
    reasons = {n.main_reason for n in Node.objects.filter(status=NodeStatus.NOT_READY)}
    assert {"Scheduling disabled", "Disk pressure", "Node unreachable", "Missing NVIDIA DCGM exporter",
            "Undrained migrated node"} <= reasons
    # Some projects run over quota.
    over = Quota.objects.with_allocation().filter(project__isnull=False, gpu_over_quota__gt=0)
    assert {q.project.name for q in over} >= {"team-vision", "team-nlp"}
    # One login per role, printed with its password.
    for username in ("admin", "rnd-admin", "mlops-admin", "rnd-manager", "researcher"):
        assert username in output
        assert authenticate(username=username, password="gpu-demo") is not None
    assert set(RoleAssignment.objects.values_list("role", flat=True)) == {
        Role.SYSTEM_ADMIN, Role.DEPARTMENT_ADMIN, Role.DEPARTMENT_VIEWER, Role.RESEARCHER}


@pytest.mark.django_db
def test_demo_is_idempotent():
    load()
    counts = [m.objects.count() for m in (NodePool, Node, Department, Project, Quota, RoleAssignment)]
    versions = list(Quota.objects.order_by("pk").values_list("version", flat=True))
    load()
    assert [m.objects.count() for m in (NodePool, Node, Department, Project, Quota, RoleAssignment)] == counts
    assert list(Quota.objects.order_by("pk").values_list("version", flat=True)) == versions
