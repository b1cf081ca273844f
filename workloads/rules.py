"""Who may submit a workload of a project to a pool (docs/concepts.md#roles, OSMO's pool roles): one rule, used by
the submission service, the API and the submission page.

A user may submit to pool P for project X when
1. the user holds `project.submit` on X (researchers, project administrators and above);
2. P is in X's cluster;
3. P is not in maintenance, unless the user is a system administrator;
4. P is open to all projects of its cluster (also when it has no access row), or lists X, X's
   department, or a group the user belongs to.
"""
from __future__ import annotations

from typing import Any

from django.db.models import Q

from access.rules import is_system_admin
from projects.models import Project
from workloads.models import PoolAccess


def may_submit_to_project(user: Any, project: Any) -> bool:
    return Project.objects.restrict(user, "submit").filter(pk=project.pk).exists()


def submit_refusal(user: Any, pool: Any, project: Any) -> str:
    """Empty when `user` may submit workloads of `project` to `pool`; else why not, in words."""
    if not may_submit_to_project(user, project):
        return (f"You may not submit workloads to project {project.name}: that needs the researcher or project "
                "administrator role on it.")
    if pool.cluster_id != project.cluster_id:
        return f"Pool {pool.name} is in another cluster than project {project.name}."
    access = getattr(pool, "access", None) if _has_access_row(pool) else None
    if access is None:
        return ""
    if access.maintenance and not is_system_admin(user):
        note = f" ({access.maintenance_note})" if access.maintenance_note else ""
        return f"Pool {pool.name} is in maintenance{note}: only system administrators may submit to it now."
    if access.open_to_cluster:
        return ""
    if access.projects.filter(pk=project.pk).exists() or access.departments.filter(pk=project.department_id).exists():
        return ""
    if user is not None and getattr(user, "is_authenticated", False) and access.groups.filter(
            pk__in=user.groups.values("pk")).exists():
        return ""
    return (f"Pool {pool.name} is open only to the departments, projects and groups its administrators listed; "
            f"project {project.name} is not one of them.")


def _has_access_row(pool: Any) -> bool:
    try:
        pool.access
    except PoolAccess.DoesNotExist:
        return False
    return True


def pools_open_q(user: Any, project: Any) -> Q:
    """The pools (NodePool rows) `user` may submit `project`'s workloads to, as one filter: the same
    rule as `submit_refusal` (without the project role, which the caller checks once)."""
    groups = list(user.groups.values_list("pk", flat=True)) if getattr(user, "is_authenticated", False) else []
    open_ = (Q(access__isnull=True) | Q(access__open_to_cluster=True) | Q(access__projects=project.pk)
             | Q(access__departments=project.department_id) | Q(access__groups__in=groups))
    q = Q(cluster_id=project.cluster_id) & open_
    if not is_system_admin(user):
        q &= Q(access__isnull=True) | Q(access__maintenance=False)
    return q
