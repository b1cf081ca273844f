"""Who may see and do what (docs/concepts.md#roles): the one place access rules live.

A rule is "subject (user or group) has role R in scope S"; S is the system, a cluster, a department
or a project. A role grants permissions such as `project.change`; a grant applies to every object
inside its scope. Objects of a cluster (the cluster itself, its pools and nodes) are also readable by
anyone holding a role somewhere inside that cluster, so that a department manager sees the pools its
quota lives in.

Every page, API view, export and live update filters through `RestrictedQuerySet.restrict(user,
action)`; nothing else decides access.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q


class ScopeType(models.TextChoices):
    SYSTEM = "system", "System"
    CLUSTER = "cluster", "Cluster"
    DEPARTMENT = "department", "Department"
    PROJECT = "project", "Project"


class Role(models.TextChoices):
    SYSTEM_ADMIN = "system_admin", "System administrator"
    DEPARTMENT_ADMIN = "department_admin", "Department administrator"
    DEPARTMENT_VIEWER = "department_viewer", "Department viewer"
    PROJECT_ADMIN = "project_admin", "Project administrator"
    RESEARCHER = "researcher", "Researcher"
    VIEWER = "viewer", "Viewer"


_ANY_SCOPE = (ScopeType.SYSTEM, ScopeType.CLUSTER, ScopeType.DEPARTMENT, ScopeType.PROJECT)
# The scopes a role may be given in (a department role covers departments, so not a single project).
Role.SCOPES = {
    Role.SYSTEM_ADMIN: (ScopeType.SYSTEM,),
    Role.DEPARTMENT_ADMIN: (ScopeType.SYSTEM, ScopeType.CLUSTER, ScopeType.DEPARTMENT),
    Role.DEPARTMENT_VIEWER: (ScopeType.SYSTEM, ScopeType.CLUSTER, ScopeType.DEPARTMENT),
    Role.PROJECT_ADMIN: _ANY_SCOPE,
    Role.RESEARCHER: _ANY_SCOPE,
    Role.VIEWER: _ANY_SCOPE,
}

_READ = frozenset(
    {"cluster.view", "nodepool.view", "node.view", "pod.view", "department.view", "project.view", "quota.view",
     # What the scheduler reports and refuses in a cluster (each page shows only the visible owners' rows).
     "enforcement.view", "schedulerqueue.view", "refusedwrite.view",
     # Karpenter's NodePools and NodeClaims mirrored from the cluster (cluster-wide, like nodes).
     "karpenternodepool.view", "nodeclaim.view",
     # Workloads through pools: platforms, pool settings, pod templates and rule sets of the cluster.
     "platform.view", "poolworkloadsettings.view", "podtemplate.view", "resourcevalidationruleset.view"}
)
_MEMBERS = frozenset({"roleassignment.view", "roleassignment.add", "roleassignment.change", "roleassignment.delete"})
ALL = "*"
ROLE_GRANTS: dict[str, frozenset[str] | str] = {
    Role.SYSTEM_ADMIN: ALL,
    Role.DEPARTMENT_ADMIN: _READ
    | _MEMBERS
    | {"department.manage_members", "department.add_project", "project.change", "project.delete", "project.manage_members",
       "project_quota.change", "project.submit", "auditevent.view",
       # Who may submit to a pool: a department administrator of the whole cluster (scope-bound).
       "poolaccess.change"},
    Role.DEPARTMENT_VIEWER: _READ,
    Role.PROJECT_ADMIN: _READ | _MEMBERS | {"project.change", "project.manage_members", "project.submit"},
    Role.RESEARCHER: _READ | {"project.submit"},
    Role.VIEWER: _READ,
}


def role_grants(role: str, permission: str) -> bool:
    grants = ROLE_GRANTS.get(role, frozenset())
    return grants == ALL or permission in grants


@dataclass(frozen=True)
class Grant:
    """One role assignment of the user, with the clusters and departments its scope lies in."""

    role: str
    scope_type: str
    cluster_id: int | None
    department_id: int | None
    project_id: int | None


def user_grants(user: Any) -> tuple[Grant, ...]:
    """The user's role assignments (direct and through groups), cached on the user object."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return ()
    cached = getattr(user, "_console_grants", None)
    if cached is not None:
        return cached
    from access.models import RoleAssignment  # late: access.models imports access.rules

    rows = RoleAssignment.objects.filter(Q(user=user) | Q(group__in=user.groups.all())).values_list(
        "role", "scope_type", "cluster_id", "department_id", "department__cluster_id", "project_id",
        "project__department_id", "project__cluster_id",
    )
    grants = []
    for role, scope, cluster, department, dep_cluster, project, proj_department, proj_cluster in rows:
        if scope == ScopeType.CLUSTER:
            grants.append(Grant(role, scope, cluster, None, None))
        elif scope == ScopeType.DEPARTMENT:
            grants.append(Grant(role, scope, dep_cluster, department, None))
        elif scope == ScopeType.PROJECT:
            grants.append(Grant(role, scope, proj_cluster, proj_department, project))
        else:
            grants.append(Grant(role, scope, None, None, None))
    if user.is_superuser:
        grants.append(Grant(Role.SYSTEM_ADMIN, ScopeType.SYSTEM, None, None, None))
    user._console_grants = tuple(grants)
    return user._console_grants


def forget_grants(user: Any) -> None:
    """Drop the cached grants (after the user's role assignments changed)."""
    if hasattr(user, "_console_grants"):
        del user._console_grants


NOTHING = Q(pk__in=[])


def _any(paths: list[str], value: int) -> Q:
    q = Q()
    for path in paths:
        q |= Q(**{path: value})
    return q


def access_q(user: Any, queryset_class: type["RestrictedQuerySet"], permission: str) -> Q:
    """The filter selecting the rows of a model the user holds `permission` on (`Q()`: all rows)."""
    paths = queryset_class.access_paths
    level = queryset_class.access_level
    action = permission.rsplit(".", 1)[1]
    q = NOTHING
    for grant in user_grants(user):
        if not role_grants(grant.role, permission):
            continue
        if grant.scope_type == ScopeType.SYSTEM:
            return Q()
        scope_id = {"cluster": grant.cluster_id, "department": grant.department_id, "project": grant.project_id}[
            grant.scope_type
        ]
        if grant.scope_type in paths:
            q |= _any(paths[grant.scope_type], scope_id)
        elif level == "cluster" and action == "view":
            # Reading the cluster-wide objects (pools, nodes) of the cluster the scope lies in.
            q |= _any(paths["cluster"], grant.cluster_id)
    return q


class RestrictedQuerySet(models.QuerySet):
    """Base of every console model's queryset: `restrict(user, action)` is the access choke point."""

    # Where a row's cluster / department / project is found, as lookups (alternatives are OR-ed).
    access_paths: dict[str, list[str]] = {}
    # "cluster": cluster-wide objects, readable from any scope inside the cluster; else scope-bound.
    access_level: str = "project"

    def restrict(self, user: Any, action: str = "view") -> "RestrictedQuerySet":
        return self.filter(access_q(user, type(self), f"{self.model._meta.model_name}.{action}"))


def user_can(user: Any, obj: models.Model, action: str = "view") -> bool:
    """Whether the user holds `action` on this one object (same rule as the querysets)."""
    return type(obj)._default_manager.restrict(user, action).filter(pk=obj.pk).exists()


def is_system_admin(user: Any) -> bool:
    return any(g.role == Role.SYSTEM_ADMIN for g in user_grants(user))


def require_system_admin(actor: Any, what: str) -> None:
    """A service's check for writes only system administrators make: `actor=None` is the system itself
    (the sync, management commands) and passes; anyone else is refused naming what they may not do."""
    if actor is not None and not is_system_admin(actor):
        raise PermissionDenied(f"Only system administrators may {what}.")
