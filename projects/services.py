"""Every write to departments, projects, quotas, priority lists and role assignments.

The quota rules (docs/concepts.md#quota) live here, once: zero rows for every (owner, pool), projects over their
department (a warning, or an error when the cluster says so), over-subscription of a pool (a
warning), the floor set by non-preemptible workloads already running, and optimistic concurrency.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Iterable

from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count, F, Q, Sum

from access.models import RoleAssignment
from access.rules import ScopeType, forget_grants, require_system_admin, user_can
from audit.models import AuditEvent
from audit.services import audit_record, snapshot
from common.exceptions import ConcurrentUpdate
from common.words import noun, verb
from kube.quantity import gib_from_mib
from nodepools.models import Cluster, NodePool
from nodepools.services import pods_link
from projects.models import Department, PriorityEntry, Project, ProjectNamespace, Quota


def _require(actor: Any, obj: Any, action: str, message: str) -> None:
    if actor is not None and not user_can(actor, obj, action):
        raise PermissionDenied(message)


# ---------------------------------------------------------------------------------------------------
# Zero quota rows

def quota_rows_create_for_pool(*, pool: NodePool) -> None:
    """A new pool gives every department and project of its cluster a zero-GPU quota row."""
    rows = [Quota(pool=pool, department=d) for d in Department.objects.filter(cluster=pool.cluster_id)]
    rows += [Quota(pool=pool, project=p) for p in Project.objects.filter(cluster=pool.cluster_id)]
    Quota.objects.bulk_create(rows)


def _quota_rows_create_for_owner(*, cluster: Cluster, department: Department | None = None,
                                 project: Project | None = None) -> None:
    Quota.objects.bulk_create(
        [Quota(pool=pool, department=department, project=project) for pool in cluster.pools.all()]
    )


# ---------------------------------------------------------------------------------------------------
# Departments

@transaction.atomic
def department_create(*, actor: Any, cluster: Cluster, name: str, description: str = "",
                      display_name: str = "") -> Department:
    require_system_admin(actor, "add departments")
    department = Department(cluster=cluster, name=name, description=description, display_name=display_name.strip())
    department.full_clean()
    department.save()
    _quota_rows_create_for_owner(cluster=cluster, department=department)
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=department, after=snapshot(department))
    return department


@transaction.atomic
def department_update(*, actor: Any, department: Department, name: str | None = None,
                      description: str | None = None, display_name: str | None = None) -> Department:
    require_system_admin(actor, "change departments")
    before = snapshot(department)
    if name is not None:
        department.name = name
    if display_name is not None:
        department.display_name = display_name.strip()
    if description is not None:
        department.description = description
    department.full_clean()
    department.save()
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=department, before=before, after=snapshot(department))
    return department


@transaction.atomic
def department_delete(*, actor: Any, department: Department) -> None:
    require_system_admin(actor, "delete departments")
    count = department.projects.count()
    if count:
        raise ValidationError(
            {"department": f"Department '{department}' still has {count} {noun(count, 'project')}: move or delete "
                           f"{verb(count, 'it', 'them')} first."}
        )
    before, pk = snapshot(department), department.pk
    department.delete()
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=department, before=before, object_id=pk)


# ---------------------------------------------------------------------------------------------------
# Projects

@transaction.atomic
def project_create(
    *,
    actor: Any,
    department: Department,
    name: str,
    namespaces: Iterable[str] | None = None,
    allow_over_quota: bool = True,
    description: str = "",
    display_name: str = "",
) -> Project:
    """Create a project with its namespaces (default `runai-<name>`), zero quota rows in every pool,
    and a priority list seeded from its department's."""
    _require(actor, department, "add_project", f"You may not add projects to department '{department}'.")
    project = Project(
        department=department, cluster_id=department.cluster_id, name=name, description=description,
        allow_over_quota=allow_over_quota, display_name=display_name.strip(),
    )
    project.full_clean()
    project.save()
    _quota_rows_create_for_owner(cluster=department.cluster, project=project)
    PriorityEntry.objects.bulk_create(
        [PriorityEntry(project=project, pool_id=e.pool_id, position=e.position) for e in department.priority_entries.all()]
    )
    _namespaces_replace(project, list(namespaces) if namespaces is not None else [f"{ProjectNamespace.DEFAULT_PREFIX}{name}"])
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=project, after=_project_snapshot(project))
    return project


def _project_snapshot(project: Project) -> dict[str, Any]:
    """A project's audited values, with its namespaces and priority list."""
    values = snapshot(project)
    values["namespaces"] = list(project.namespaces.order_by("name").values_list("name", flat=True))
    values["priority"] = list(project.priority_entries.order_by("position").values_list("pool__name", flat=True))
    return values


PROJECT_EDITABLE = {"name", "display_name", "description", "allow_over_quota"}


@transaction.atomic
def project_update(*, actor: Any, project: Project, **changes: Any) -> Project:
    _require(actor, project, "change", f"You may not change project '{project}'.")
    unknown = set(changes) - PROJECT_EDITABLE
    if unknown:
        raise ValidationError({f: "This field cannot be changed here." for f in sorted(unknown)})
    before = _project_snapshot(project)
    for name, value in changes.items():
        setattr(project, name, value)
    project.full_clean()
    project.save()
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=project, before=before, after=_project_snapshot(project))
    return project


@transaction.atomic
def project_delete(*, actor: Any, project: Project) -> None:
    _require(actor, project, "delete", f"You may not delete project '{project}'.")
    before, pk = _project_snapshot(project), project.pk
    project.delete()
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=project, before=before, object_id=pk)


@transaction.atomic
def project_namespaces_set(*, actor: Any, project: Project, namespaces: list[str]) -> list[ProjectNamespace]:
    """Set the namespaces a project owns; pods in them become (or stop being) its workloads."""
    _require(actor, project, "change", f"You may not change project '{project}'.")
    before = _project_snapshot(project)
    rows = _namespaces_replace(project, namespaces)
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=project, before=before, after=_project_snapshot(project))
    return rows


MAX_PROJECT_NAMESPACES = 100


def _namespaces_replace(project: Project, namespaces: list[str]) -> list[ProjectNamespace]:
    if not namespaces:
        raise ValidationError({"namespaces": "A project owns at least one namespace."})
    if len(namespaces) > MAX_PROJECT_NAMESPACES:
        raise ValidationError({"namespaces": f"A project owns at most {MAX_PROJECT_NAMESPACES} namespaces "
                                             f"(got {len(namespaces)})."})
    rows = []
    for name in dict.fromkeys(namespaces):
        row = ProjectNamespace(cluster_id=project.cluster_id, project=project, name=name)
        try:
            row.full_clean(exclude=["cluster", "project"], validate_unique=False)
        except ValidationError as exc:
            messages = exc.message_dict.get("name", exc.messages)
            raise ValidationError({"namespaces": [f"'{name}': {m}" for m in messages]}) from None
        clash = ProjectNamespace.objects.filter(cluster_id=project.cluster_id, name=name).exclude(project=project).first()
        if clash:
            raise ValidationError({"namespaces": f"Namespace '{name}' already belongs to project '{clash.project}'."})
        rows.append(row)
    project.namespaces.all().delete()
    ProjectNamespace.objects.bulk_create(rows)

    pods_link(cluster=project.cluster)
    return rows


@transaction.atomic
def project_priority_set(*, actor: Any, project: Project, pools: list[NodePool]) -> None:
    """Set a project's ordered node pool priority list (empty: the cluster's default order)."""
    _require(actor, project, "change", f"You may not change project '{project}'.")
    before = _project_snapshot(project)
    _priority_set(owner={"project": project}, cluster_id=project.cluster_id, pools=pools)
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=project, before=before, after=_project_snapshot(project))


@transaction.atomic
def department_priority_set(*, actor: Any, department: Department, pools: list[NodePool]) -> None:
    """A department's list only seeds the lists of its projects created afterwards."""
    require_system_admin(actor, "change departments")
    _priority_set(owner={"department": department}, cluster_id=department.cluster_id, pools=pools)


def _priority_set(*, owner: dict[str, Any], cluster_id: int, pools: list[NodePool]) -> None:
    ids = [pool.pk for pool in pools]
    if len(set(ids)) != len(ids):
        raise ValidationError({"pools": "A node pool may appear only once in a priority list."})
    foreign = [pool.name for pool in pools if pool.cluster_id != cluster_id]
    if foreign:
        raise ValidationError({"pools": f"Not pools of this cluster: {', '.join(foreign)}."})
    PriorityEntry.objects.filter(**owner).delete()
    PriorityEntry.objects.bulk_create(
        [PriorityEntry(pool=pool, position=index, **owner) for index, pool in enumerate(pools)]
    )


# ---------------------------------------------------------------------------------------------------
# Quota

QUOTA_FIELDS = (
    "gpu_deserved", "cpu_deserved", "memory_deserved_mib", "gpu_limit", "cpu_limit", "memory_limit_mib",
    "over_quota_weight", "rank",
)
_RESOURCES = (  # (deserved field, label, unit, allocation annotation in the same unit)
    ("gpu_deserved", "GPU", "GPUs", "gpu_non_preemptible"),
    ("cpu_deserved", "CPU", "cores", "cpu_non_preemptible"),
    ("memory_deserved_mib", "CPU memory", "GiB", "memory_non_preemptible_mib"),  # stored in MiB, said in GiB
)


@dataclass
class QuotaResult:
    quota: Quota
    warnings: list[str] = field(default_factory=list)


@transaction.atomic
def quota_update(*, actor: Any, quota: Quota, expected_version: int | None, **values: Any) -> QuotaResult:
    """Change one quota row. Errors raise ValidationError keyed by field; warnings are returned.

    `expected_version` is the version the caller's form or API client showed; a different current
    version means someone else changed the row meanwhile: ConcurrentUpdate, nothing written. `None`
    (commands, the demo) skips that check.
    """
    unknown = set(values) - set(QUOTA_FIELDS)
    if unknown:
        raise ValidationError({f: "Not a quota field." for f in sorted(unknown)})
    if actor is not None and not Quota.objects.restrict(actor, "change").filter(pk=quota.pk).exists():
        raise PermissionDenied(f"You may not change the quota of {quota.owner_kind} '{quota.owner}'.")
    owner_department_id = quota.department_id or quota.project.department_id
    # Lock the department's row in this pool: every write that could change the department's or its
    # projects' sums queues here, so the sum checks below cannot be raced past.
    list(Quota.objects.select_for_update(of=("self",)).filter(pool_id=quota.pool_id, department_id=owner_department_id)
         .order_by().values_list("pk"))
    current = (Quota.objects.select_for_update(of=("self",)).select_related("pool__cluster", "project", "department")
               .order_by().get(pk=quota.pk))
    if expected_version is not None and current.version != expected_version:
        raise ConcurrentUpdate(
            f"The quota of {current.owner_kind} '{current.owner}' in pool '{current.pool}' was changed by someone "
            f"else meanwhile (version {current.version}, you edited version {expected_version}). Nothing was saved: "
            "reload to see the current values.",
            current_version=current.version,
        )
    before = snapshot(current)
    stored = {name: getattr(current, name) for name in QUOTA_FIELDS}
    for name, value in values.items():
        setattr(current, name, None if value == "" and name != "gpu_deserved" else value)
    current.full_clean()
    errors: dict[str, list[str]] = {}
    warnings: list[str] = []
    _check_usage_floor(current, errors, warnings)
    _check_department_sum(current, errors, warnings)
    _check_oversubscription(current, warnings)
    if errors:
        raise ValidationError(errors)
    if {name: getattr(current, name) for name in QUOTA_FIELDS} == stored:
        return QuotaResult(current, warnings)  # nothing changed: same version, nothing audited
    current.version = F("version") + 1
    current.save()
    current.refresh_from_db()
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=current, before=before, after=snapshot(current))
    return QuotaResult(current, warnings)


def _check_usage_floor(quota: Quota, errors: dict[str, list[str]], warnings: list[str]) -> None:
    """A quota cannot go below what non-preemptible workloads already use in that pool; below what all
    its workloads use is allowed, with a warning: the difference runs over quota and may be preempted."""
    usage = quota.allocation()
    for name, label, unit, used_attr in _RESOURCES:
        value = getattr(quota, name)
        used = usage[used_attr]
        if value is not None and used and Decimal(value) < Decimal(used):
            errors.setdefault(name, []).append(
                f"Non-preemptible workloads of {quota.owner_kind} '{quota.owner}' already use {_in_unit(name, used)} {unit} "
                f"in pool '{quota.pool}'; its {label} quota cannot be set below that."
            )
    allocated = Decimal(usage["gpu_allocated"] or 0)
    deserved = Decimal(quota.gpu_deserved)
    if allocated > deserved and "gpu_deserved" not in errors:
        over = allocated - deserved
        warnings.append(
            f"{quota.owner} runs {_gpus(allocated)} in {quota.pool}, above its deserved {_fmt(deserved)}: "
            f"{_gpus(over)} {'is' if over == 1 else 'are'} over quota and may be preempted."
        )


def _check_department_sum(quota: Quota, errors: dict[str, list[str]], warnings: list[str]) -> None:
    """Σ projects' deserved vs the department's: a warning, or an error when the cluster says so.

    The error speaks of what would have been (nothing is saved); the warning of what now is."""
    department_id = quota.department_id or quota.project.department_id
    department_row = Quota.objects.filter(pool_id=quota.pool_id, department_id=department_id).first()
    if department_row is None:
        return
    strict = quota.pool.cluster.limit_projects_to_department_quota
    projects = Quota.objects.filter(pool_id=quota.pool_id, project__department_id=department_id)
    names = [name for name, *_ in _RESOURCES]
    # The other projects' sums with this one's new values, or every project's for the department's row.
    sums = _sums(projects.exclude(pk=quota.pk) if quota.project_id else projects, names)
    for name, label, unit, _ in _RESOURCES:
        if quota.project_id:
            value = getattr(quota, name)
            total = None if sums[name] is None or value is None else sums[name] + Decimal(value)
            allowed = getattr(department_row, name)
        else:
            total = sums[name]
            allowed = getattr(quota, name)
        if total is None or allowed is None or total <= allowed:
            continue
        department = department_row.department
        if strict:
            errors.setdefault(name, []).append(
                f"Projects of department '{department}' would have {_in_unit(name, total)} {unit} of deserved {label} quota "
                f"in pool '{quota.pool}', more than the department's {_in_unit(name, allowed)}. "
                "This cluster limits projects to their department's quota."
            )
        else:
            warnings.append(
                f"Projects of {department} now have {_amount(name, total)} deserved in {quota.pool}, "
                f"above the department's {_in_unit(name, allowed)}."
            )


def _sums(rows, names: list[str]) -> dict[str, Decimal | None]:
    """Σ of each column over the rows, None for a column where any row is unlimited (NULL): one query."""
    found = rows.aggregate(**{f"{name}_total": Sum(name) for name in names},
                           **{f"{name}_unlimited": Count("pk", filter=Q(**{f"{name}__isnull": True})) for name in names})
    return {name: None if found[f"{name}_unlimited"] else Decimal(found[f"{name}_total"] or 0) for name in names}


def _sum(rows, name: str, extra: Any) -> Decimal | None:
    """Σ of a column plus one more value; None when any part is unlimited (NULL)."""
    if extra is None:
        return None
    total = _sums(rows, [name])[name]
    return None if total is None else total + Decimal(extra)


def _check_oversubscription(quota: Quota, warnings: list[str]) -> None:
    """Σ departments' deserved GPUs above the pool's ready GPUs (or its GPU limit): allowed, with a
    warning. The ratio is the one the quota grid and the overview show (Σ deserved / ready GPUs)."""
    if quota.project_id:
        return
    pool = NodePool.objects.with_capacity().get(pk=quota.pool_id)
    ready = Decimal(pool.gpu_ready or 0)
    total = _sum(Quota.objects.for_departments().filter(pool_id=quota.pool_id).exclude(pk=quota.pk), "gpu_deserved",
                 quota.gpu_deserved)
    if total is None:
        return
    if total > ready:
        ratio = (f"over-subscription ratio {_fmt((total / ready).quantize(Decimal('0.01'), rounding=ROUND_HALF_UP))}"
                 if ready else "no ready GPUs at all")
        warnings.append(
            f"Departments now have {_gpus(total)} deserved in {quota.pool}, above its {_fmt(ready)} ready GPUs "
            f"(of {_fmt(pool.gpu_total or 0)}): {ratio}."
        )
    elif pool.gpu_limit is not None and total > pool.gpu_limit:
        warnings.append(
            f"Departments now have {_gpus(total)} deserved in {quota.pool}, above its GPU limit of "
            f"{_fmt(pool.gpu_limit)}."
        )


def _gpus(value: Any) -> str:
    return f"{_fmt(value)} GPU{'' if Decimal(value) == 1 else 's'}"


def _amount(name: str, value: Any) -> str:
    """A quantity of one quota resource in words: "24 GPUs", "16 CPU cores", "2048 MiB of CPU memory"."""
    if name == "gpu_deserved":
        return _gpus(value)
    if name == "cpu_deserved":
        return f"{_fmt(value)} CPU cores"
    return f"{_in_unit(name, value)} GiB of CPU memory"


def _in_unit(name: str, value: Any) -> str:
    """A quota value as its messages say it: memory (stored in MiB) in GiB, as every page shows it."""
    if name.startswith("memory_"):
        return _fmt(gib_from_mib(round(Decimal(value))))
    return _fmt(value)


def _fmt(value: Any) -> str:
    value = Decimal(value)
    return f"{value.normalize():f}" if value == value.to_integral() else f"{value:f}".rstrip("0")


# ---------------------------------------------------------------------------------------------------
# Role assignments

@transaction.atomic
def role_assign(
    *,
    actor: Any,
    role: str,
    user: Any = None,
    group: Group | None = None,
    cluster: Cluster | None = None,
    department: Department | None = None,
    project: Project | None = None,
) -> RoleAssignment:
    """Give a user or group a role in a scope (the system when no cluster/department/project is named)."""
    scope_type = (
        ScopeType.PROJECT if project else ScopeType.DEPARTMENT if department else ScopeType.CLUSTER if cluster
        else ScopeType.SYSTEM
    )
    if sum(x is not None for x in (cluster, department, project)) > 1:
        raise ValidationError({"scope": "Name one scope: a cluster, a department or a project."})
    if (user is None) == (group is None):
        raise ValidationError({"subject": "Name either a user or a group."})
    _require_member_manager(actor, scope_type, department, project)
    assignment = RoleAssignment(
        role=role, user=user, group=group, scope_type=scope_type, cluster=cluster, department=department, project=project
    )
    assignment.full_clean()
    existing = RoleAssignment.objects.filter(
        role=role, user=user, group=group, scope_type=scope_type, cluster=cluster, department=department, project=project
    ).first()
    if existing:
        return existing
    assignment.save()
    if user is not None:
        forget_grants(user)
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=assignment, after=snapshot(assignment))
    return assignment


def _require_member_manager(actor: Any, scope_type: str, department: Department | None, project: Project | None) -> None:
    if actor is None:
        return
    if scope_type == ScopeType.PROJECT:
        _require(actor, project, "manage_members", f"You may not manage the members of project '{project}'.")
    elif scope_type == ScopeType.DEPARTMENT:
        _require(actor, department, "manage_members", f"You may not manage the members of department '{department}'.")
    else:
        require_system_admin(actor, "assign roles for a whole cluster or the system")


@transaction.atomic
def role_unassign(*, actor: Any, assignment: RoleAssignment) -> None:
    _require_member_manager(actor, assignment.scope_type, assignment.department, assignment.project)
    before, pk = snapshot(assignment), assignment.pk
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=assignment, before=before, object_id=pk)
    assignment.delete()
    if assignment.user is not None:
        forget_grants(assignment.user)
