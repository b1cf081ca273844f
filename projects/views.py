"""Pages of departments, projects, members, the quota grid and priority lists, and the pages that show
a cluster's pools with their quota (the overview, a pool). Thin: selectors read (restricted to what the
user may see; anything else is a 404), services write and check the rules."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from access.rules import Role, ScopeType, is_system_admin, user_can
from common.exceptions import ConcurrentUpdate
from common.parsing import is_digits
from nodepools import selectors as pool_selectors
from nodepools.memo import reads_memo
from nodepools.models import Cluster, NodePool
from nodepools.selectors import cluster_list
from nodepools.tables import NodeTable, OverviewPoolTable
from nodepools.views import SESSION_CLUSTER
from nodepools.views import _hint as hint
from nodepools.views import current_cluster
from projects import selectors, services
from projects.filtersets import DepartmentFilterSet, ProjectFilterSet
from projects.forms import (
    DepartmentCreateForm,
    DepartmentForm,
    MemberForm,
    PriorityForm,
    ProjectCreateForm,
    ProjectForm,
    QuotaForm,
)
from projects.models import Department, Project, Quota
from projects.tables import DepartmentTable, ProjectTable
from projects.utilization import owner_chart, owner_panel
from projects.waiting import waiting_requests_first
from ui.charts import quota_figure
from ui.pages import htmx_partial, table_page
from ui.tables import table_build
from ui.views import form_errors_from

DEPARTMENT_ROLES = [r for r in Role.values if ScopeType.DEPARTMENT in Role.SCOPES[r]]
PROJECT_ROLES = [r for r in Role.values if ScopeType.PROJECT in Role.SCOPES[r]]


def _hint(cluster_id: int, kinds) -> None:
    hint(cluster_id, kinds)


# ---------------------------------------------------------------------------------------------------
# Departments

@login_required
def department_list(request):
    return table_page(
        request, template="projects/department_list.html", table_class=DepartmentTable,
        queryset=selectors.department_list(user=request.user), filterset_class=DepartmentFilterSet,
        csv_name="departments", dropdown_fields=["cluster"], context={"can_add": is_system_admin(request.user)},
    )


# "Why is it waiting?" on a page: the longest waiting first, this many; the API lists every one.
WAITING_SHOWN = 50


def _waiting(waiting: tuple[list, int], api_url: str) -> dict:
    shown, total = waiting
    return {"waiting": shown, "waiting_total": total, "waiting_api": api_url}


@login_required
@reads_memo
def department_detail(request, pk: int):
    department = get_object_or_404(Department.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
    return render(request, "projects/department_detail.html", {
        "department": department,
        "summaries": selectors.department_summary(user=request.user, department=department),
        "utilization_url": reverse("department-utilization", args=[department.pk]),
        **_waiting(waiting_requests_first(user=request.user, department=department, first=WAITING_SHOWN),
                   reverse("api:department-waiting", args=[department.pk])),
        "members": selectors.members_list(user=request.user, department=department),
        "can_manage_members": user_can(request.user, department, "manage_members"),
        "can_edit": is_system_admin(request.user),
        "can_add_project": user_can(request.user, department, "add_project"),
        "member_form": MemberForm(roles=DEPARTMENT_ROLES),
    })


@login_required
def department_create(request):
    if not is_system_admin(request.user):
        raise PermissionDenied("Only system administrators may add departments.")
    clusters = cluster_list(user=request.user)
    chosen = request.GET.get("cluster") or getattr(current_cluster(request, clusters), "pk", None)
    form = DepartmentCreateForm(request.POST or None, clusters=clusters, initial={"cluster": chosen})
    if request.method == "POST" and form.is_valid():
        try:
            department = services.department_create(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            form_errors_from(form, exc)
        else:
            messages.success(request, f"Department '{department}' created, with a zero quota in every pool.")
            return redirect("department-detail", department.pk)
    return render(request, "projects/form.html", {"form": form, "title": "Add a department",
                                                  "cancel": "department-list"})


@login_required
def department_edit(request, pk: int):
    if not is_system_admin(request.user):
        raise PermissionDenied("Only system administrators may change departments.")
    department = get_object_or_404(Department.objects.restrict(request.user, "view"), pk=pk)
    form = DepartmentForm(request.POST or None, initial={"name": department.name, "display_name": department.display_name,
                                                          "description": department.description})
    if request.method == "POST" and form.is_valid():
        try:
            services.department_update(actor=request.user, department=department, **form.cleaned_data)
        except ValidationError as exc:
            department.refresh_from_db()
            form_errors_from(form, exc)
        else:
            messages.success(request, f"Department '{department}' saved.")
            return redirect("department-detail", department.pk)
    return render(request, "projects/form.html", {"form": form, "title": f"Edit department {department}",
                                                  "object": department})


# ---------------------------------------------------------------------------------------------------
# Projects

@login_required
def project_list(request):
    return table_page(
        request, template="projects/project_list.html", table_class=ProjectTable,
        queryset=selectors.project_list(user=request.user).prefetch_related("namespaces"),
        filterset_class=ProjectFilterSet, csv_name="projects", dropdown_fields=["cluster", "department"],
        context={"can_add": Department.objects.restrict(request.user, "add_project").exists()},
    )


@login_required
def my_projects(request):
    """Where a researcher (or anyone whose roles are in projects only) lands with several projects."""
    return render(request, "projects/my_projects.html", {"projects": selectors.my_projects(user=request.user)})


@login_required
@reads_memo
def project_detail(request, pk: int):
    project = get_object_or_404(Project.objects.restrict(request.user, "view").select_related("department", "cluster"),
                                pk=pk)
    priority = list(NodePool.objects.filter(priority_entries__project=project).order_by("priority_entries__position"))
    summary = selectors.project_summary(user=request.user, project=project)
    return render(request, "projects/project_detail.html", {
        "project": project,
        "summary": summary, "allocated": selectors.allocated_in_words(summary),
        "utilization_url": reverse("project-utilization", args=[project.pk]),
        **_waiting(waiting_requests_first(user=request.user, project=project, first=WAITING_SHOWN),
                   reverse("api:project-waiting", args=[project.pk])),
        "members": selectors.members_list(user=request.user, project=project),
        "namespaces": project.namespaces.all(),
        "priority": priority,
        "other_pools": NodePool.objects.filter(cluster=project.cluster_id).exclude(pk__in=[p.pk for p in priority]),
        "can_change": user_can(request.user, project, "change"),
        "can_manage_members": user_can(request.user, project, "manage_members"),
        "member_form": MemberForm(roles=PROJECT_ROLES),
    })


@login_required
def project_create(request):
    departments = Department.objects.restrict(request.user, "add_project").select_related("cluster")
    if not departments.exists():
        raise PermissionDenied("You may not add projects.")
    form = ProjectCreateForm(request.POST or None, departments=departments,
                             initial={"department": request.GET.get("department"), "allow_over_quota": True})
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        data["namespaces"] = data["namespaces"] or None
        try:
            project = services.project_create(actor=request.user, **data)
        except ValidationError as exc:
            form_errors_from(form, exc)
        else:
            messages.success(request, f"Project '{project}' created, with a zero quota in every pool.")
            _hint(project.cluster_id, ["quotas"])
            return redirect("project-detail", project.pk)
    return render(request, "projects/form.html", {"form": form, "title": "Add a project", "cancel": "project-list"})


@login_required
def project_edit(request, pk: int):
    project = get_object_or_404(Project.objects.restrict(request.user, "change"), pk=pk)
    form = ProjectForm(request.POST or None, initial={
        "name": project.name, "display_name": project.display_name, "description": project.description,
        "allow_over_quota": project.allow_over_quota,
        "namespaces": ", ".join(project.namespaces.values_list("name", flat=True)),
    })
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        namespaces = data.pop("namespaces")
        try:
            services.project_update(actor=request.user, project=project, **data)
            if namespaces and sorted(namespaces) != sorted(project.namespaces.values_list("name", flat=True)):
                services.project_namespaces_set(actor=request.user, project=project, namespaces=namespaces)
        except ValidationError as exc:
            project.refresh_from_db()
            form_errors_from(form, exc)
        else:
            messages.success(request, f"Project '{project}' saved.")
            return redirect("project-detail", project.pk)
    return render(request, "projects/form.html", {"form": form, "title": f"Edit project {project}", "object": project})


@login_required
@require_POST
def project_priority(request, pk: int):
    """Reorder a project's node pool priority list: `pools` in the new order, or `move=up:<id>` /
    `move=down:<id>` / `remove=<id>` / `add=<id>` against the posted order (works without JavaScript)."""
    project = get_object_or_404(Project.objects.restrict(request.user, "change"), pk=pk)
    pools = NodePool.objects.filter(cluster=project.cluster_id)
    form = PriorityForm(request.POST, pools=pools)
    if not form.is_valid():
        for errors in form.errors.values():
            for message in errors:
                messages.error(request, message)
        return redirect("project-detail", project.pk)
    order = list(form.cleaned_data["pools"])
    move, remove, add = request.POST.get("move", ""), request.POST.get("remove"), request.POST.get("add")
    if ":" in move:
        direction, raw = move.split(":", 1)
        if is_digits(raw) and int(raw) in order:
            i = order.index(int(raw))
            j = i - 1 if direction == "up" else i + 1
            if 0 <= j < len(order):
                order[i], order[j] = order[j], order[i]
    if remove and is_digits(remove) and int(remove) in order:
        order.remove(int(remove))
    if add and is_digits(add) and int(add) not in order:
        order.append(int(add))
    by_id = {p.pk: p for p in pools}
    try:
        services.project_priority_set(actor=request.user, project=project,
                                      pools=[by_id[i] for i in order if i in by_id])
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    else:
        messages.success(request, "Node pool priority saved.")
    return redirect("project-detail", project.pk)


# ---------------------------------------------------------------------------------------------------
# Members

def _members(request, *, department=None, project=None):
    owner = department or project
    roles = DEPARTMENT_ROLES if department else PROJECT_ROLES
    if "remove" in request.POST:
        assignment = get_object_or_404(selectors.members_list(user=request.user, department=department,
                                                               project=project), pk=request.POST["remove"])
        services.role_unassign(actor=request.user, assignment=assignment)
        messages.success(request, f"{assignment.subject} is no longer {assignment.get_role_display()} of {owner}.")
    else:
        form = MemberForm(request.POST, roles=roles)
        if form.is_valid():
            try:
                assignment = services.role_assign(actor=request.user, role=form.cleaned_data["role"],
                                                  user=form.cleaned_data["username"], department=department,
                                                  project=project)
            except ValidationError as exc:
                for message in exc.messages:
                    messages.error(request, message)
            else:
                messages.success(request, f"{assignment.subject} is {assignment.get_role_display()} of {owner}.")
        else:
            for name, errors in form.errors.items():
                for message in errors:
                    messages.error(request, f"{form[name].label}: {message}" if name in form.fields
                                   else message)


@login_required
@require_POST
def department_members(request, pk: int):
    department = get_object_or_404(Department.objects.restrict(request.user, "manage_members"), pk=pk)
    _members(request, department=department)
    return redirect("department-detail", department.pk)


@login_required
@require_POST
def project_members(request, pk: int):
    project = get_object_or_404(Project.objects.restrict(request.user, "manage_members"), pk=pk)
    _members(request, project=project)
    return redirect("project-detail", project.pk)


# ---------------------------------------------------------------------------------------------------
# Quota

@login_required
def quota_grid(request, pk: int):
    cluster = get_object_or_404(cluster_list(user=request.user), pk=pk)
    request.session["console.cluster"] = cluster.pk
    grid = selectors.quota_grid(user=request.user, cluster=cluster)
    if not grid["rows"]:
        # Nothing of this cluster's organisation is the user's to see.
        grid["empty"] = True
    template = "projects/quota_grid.html"
    if htmx_partial(request):
        template += "#table"
    return render(request, template, {"cluster": cluster, "live_clusters": [cluster.pk], **grid})


@login_required
def quota_edit(request, pk: int):
    """The inline editor of one grid cell (an htmx fragment), or a page of its own without JavaScript.

    The form carries the version it was read at; the service refuses a save over someone else's
    change (ConcurrentUpdate) and the editor says so, keeping what the user typed."""
    quota = get_object_or_404(Quota.objects.restrict(request.user, "view")
                              .select_related("pool__cluster", "department", "project__department"), pk=pk)
    can_change = Quota.objects.restrict(request.user, "change").filter(pk=quota.pk).exists()
    warnings, conflict, saved, what_if = [], None, False, None
    if request.method == "POST":
        if not can_change:
            raise PermissionDenied(f"You may not change the quota of {quota.owner_kind} '{quota.owner}'.")
        form = QuotaForm(request.POST)
        if form.is_valid() and "what_if" in request.POST:
            # Before saving: each sibling's fair share now and with the values typed (nothing is written).
            what_if = selectors.quota_what_if(user=request.user, quota=quota, values=form.values())
        elif form.is_valid():
            try:
                result = services.quota_update(actor=request.user, quota=quota,
                                               expected_version=form.cleaned_data["version"], **form.values())
            except ConcurrentUpdate as exc:
                conflict = str(exc)
            except ValidationError as exc:
                form_errors_from(form, exc)
            else:
                quota, warnings, saved = result.quota, result.warnings, True
                form = QuotaForm(initial=QuotaForm.initial_from(quota))
                _hint(quota.pool.cluster_id, ["quotas"])
    else:
        form = QuotaForm(initial=QuotaForm.initial_from(quota))
    context = {"quota": quota, "form": form, "warnings": warnings, "conflict": conflict, "saved": saved,
               "can_change": can_change, "cluster": quota.pool.cluster, "inline": bool(request.htmx),
               "what_if": what_if}
    if request.htmx:
        if saved:
            # The grid's per-pool summary (Σ deserved, ratio) changes with the save: sent along, out of band.
            context.update(selectors.quota_summary(user=request.user, cluster=quota.pool.cluster))
        return render(request, "projects/quota_edit.html#inline", context)
    return render(request, "projects/quota_edit.html", context)


# ---------------------------------------------------------------------------------------------------
# A cluster's pools with their quota: the overview (and the landing page) and a pool's page. They live
# here, above nodepools, because they show the organisation's quota beside the pools' capacity.

@login_required
@reads_memo
def home(request):
    """Department managers land on their departments, researchers (roles in projects only) on their
    projects; everyone else on the current cluster's overview."""
    departments = selectors.landing_departments(user=request.user)
    if departments is not None:
        if len(departments) == 1:
            return redirect("department-detail", departments[0])
        return redirect("department-list")
    projects = selectors.landing_projects(user=request.user)
    if projects is not None:
        if len(projects) == 1:
            return redirect("project-detail", projects[0])
        return redirect("my-projects")
    cluster = current_cluster(request)
    if cluster is None:
        return render(request, "home.html", {"cluster": None})
    return overview(request, cluster)


@login_required
@reads_memo
def cluster_overview(request, pk: int):
    cluster = get_object_or_404(cluster_list(user=request.user), pk=pk)
    request.session[SESSION_CLUSTER] = cluster.pk
    return overview(request, cluster)


def overview(request, cluster: Cluster):
    """Each pool's status, nodes and GPUs, and deserved / allocated / over-quota per department and pool."""
    pools = list(pool_selectors.pool_table_list(user=request.user, cluster=cluster))
    # One pass over the cluster's pods serves the pool totals and the chart.
    usage = pool_selectors.pod_usage(NodePool.objects.filter(cluster=cluster).values_list("pk", flat=True))
    selectors.pools_attach_usage_and_fit(pools, usage)  # and what fits now, a compact line per pool
    table = table_build(request, OverviewPoolTable, pools, paginate=False)
    context = {
        "cluster": cluster, "table": table, "table_class": OverviewPoolTable, "table_key": OverviewPoolTable.key,
        "column_choices": OverviewPoolTable.column_choices(request.user),
        "chart": quota_figure(selectors.overview_chart(user=request.user, cluster=cluster, usage=usage)),
        "live_clusters": [cluster.pk],
    }
    # Per pool: ready / total GPUs against the departments' deserved (the quota grid's head).
    context["capacity"] = selectors.pool_capacity(user=request.user, cluster=cluster, pools=pools)
    template = "home.html"
    if htmx_partial(request):
        template += "#table"
    return render(request, template, context)


@login_required
@reads_memo
def pool_detail(request, pk: int):
    pool = get_object_or_404(pool_selectors.pool_table_list(user=request.user), pk=pk)
    usage = pool_selectors.pod_usage([pool.pk])
    pool_selectors.pools_attach_usage([pool], usage)
    nodes = table_build(request, NodeTable, pool_selectors.node_table_list(user=request.user,
                                                                      sort=request.GET.get("nodes-sort", ""))
                        .filter(pool=pool), prefix="nodes-")
    quotas = selectors.quotas_attach_allocation(list(
        Quota.objects.restrict(request.user, "view").filter(pool=pool)
        .select_related("department", "project__department")
        .order_by("department__name", "project__department__name", "project__name")), usage=usage)
    conflicts = pool_selectors.pool_conflict_nodes(user=request.user, pool=pool)
    # Will it fit: the pool's fragmentation, and what would make room for the shape asked (?pods=&gpus=).
    shape, fit_errors = selectors.fit_shape(request.GET)
    fit = selectors.pool_fit(user=request.user, pool=pool, shape=shape, domain=request.GET.get("domain", "")[:253])
    context = {
        "pool": pool, "nodes": nodes, "quotas": quotas, "conflicts": conflicts, "fit": fit, "fit_errors": fit_errors,
        "gpu_shapes": pool_selectors.pool_gpu_shapes(pool),
        "mig_nodes": pool_selectors.pool_gpu_shape_nodes(user=request.user, pool=pool),
        "fit_shape": {"pods": request.GET.get("pods", ""), "gpus": request.GET.get("gpus", ""),
                      "domain": request.GET.get("domain", ""), "profile": request.GET.get("profile", "")},
        "can_change": is_system_admin(request.user), "live_clusters": [pool.cluster_id],
        "department_quotas": [q for q in quotas if q.department_id],
        "project_quotas": [q for q in quotas if q.project_id],
    }
    template = "projects/pool_detail.html"
    if htmx_partial(request):
        template += "#table"
    return render(request, template, context)


def _utilization(request, owner, **kind):
    """The GPU utilization section of a project's or department's page, fetched after the page (its
    Prometheus query reads five minutes of every GPU the owner holds: the page does not wait for it)."""
    name = "project" if "project" in kind else "department"
    return render(request, "projects/_utilization.html", {
        "utilization": owner_panel(cluster=owner.cluster, **kind),
        "chart_url": reverse(f"{name}-utilization-chart", args=[owner.pk])})


@login_required
def project_utilization(request, pk: int):
    project = get_object_or_404(Project.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
    return _utilization(request, project, project=project)


@login_required
def department_utilization(request, pk: int):
    department = get_object_or_404(Department.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
    return _utilization(request, department, department=department)


def _utilization_chart(request, owner, **kind):
    """The GPU utilization chart (`?period=24h|7d`) of a project's or department's page, fetched after it."""
    name = "project" if "project" in kind else "department"
    return render(request, "projects/_utilization_chart.html", {
        "chart": owner_chart(cluster=owner.cluster, period=request.GET.get("period", ""), **kind),
        "chart_url": reverse(f"{name}-utilization-chart", args=[owner.pk])})


@login_required
def project_utilization_chart(request, pk: int):
    project = get_object_or_404(Project.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
    return _utilization_chart(request, project, project=project)


@login_required
def department_utilization_chart(request, pk: int):
    department = get_object_or_404(Department.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
    return _utilization_chart(request, department, department=department)
