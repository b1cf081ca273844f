"""Pages of platforms, pool workload settings, pod templates and rule sets. Thin: reads go through the
selectors (restricted to what the user may see: a 404 hides the rest), writes through the services
(which decide who may configure a cluster: a 403 says so). Below them: the workloads table, submitting
(Preview, then Submit), stopping, and who may submit to a pool."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from common.exceptions import ConcurrentUpdate
from common.parsing import is_digits
from kube.client import api_error_message
from nodepools import selectors as pool_selectors
from nodepools.memo import reads_memo
from nodepools.models import Cluster, NodePool
from nodepools.sync import api_client_for
from ui.pages import htmx_partial, table_page, wants_csv
from ui.views import form_errors_from
from projects.models import Project
from workloads import engine, forecast, podsecurity, selectors, services, submission
from workloads.filtersets import (
    PlatformFilterSet,
    PodTemplateFilterSet,
    RuleSetFilterSet,
    WorkloadPageFilterSet,
    ended_filtered,
)
from workloads.forms import (
    ConfirmDeleteForm,
    PlatformForm,
    PodTemplateForm,
    PoolSettingsForm,
    RuleSetForm,
    SubmitForm,
    as_lines,
    as_yaml,
)
from workloads.forms_access import PoolAccessForm
from workloads.models import JOB_KIND, Workload
from workloads.templatetags.workloads_forecast import project_start_estimates_context
from workloads.tables import PlatformTable, PodTemplateTable, RuleSetTable, WorkloadTable

logger = logging.getLogger(__name__)


def _pool(request, pk: int):
    return get_object_or_404(pool_selectors.pool_table_list(user=request.user).select_related("cluster"), pk=pk)


def _save(request, form, action, success: str):
    """Run a service call for a valid form; its ValidationError lands on the form's fields, a concurrent
    change on the whole form. Returns the result, or None when the form now carries errors."""
    try:
        result = action()
    except ValidationError as exc:
        form_errors_from(form, exc)
        return None
    except ConcurrentUpdate as exc:
        form.add_error(None, str(exc))
        return None
    messages.success(request, success)
    return result


# ---------------------------------------------------------------------------------------------------
# Lists (one FilterSet per model; the same rows in the CSV)

@login_required
def platform_list(request):
    return table_page(
        request, template="workloads/platform_list.html", table_class=PlatformTable,
        queryset=selectors.platform_list(user=request.user), filterset_class=PlatformFilterSet,
        csv_name="platforms", dropdown_fields=["cluster", "pool"], default_order="pool",
        context={"can_add_templates": _may_any(request.user, "podtemplate")},
    )


@login_required
def pod_template_list(request):
    clusters = _configurable_clusters(request.user, "podtemplate")
    return table_page(
        request, template="workloads/podtemplate_list.html", table_class=PodTemplateTable,
        queryset=selectors.pod_template_list(user=request.user), filterset_class=PodTemplateFilterSet,
        csv_name="pod-templates", dropdown_fields=["cluster"], context={"clusters": clusters},
    )


@login_required
def rule_set_list(request):
    clusters = _configurable_clusters(request.user, "resourcevalidationruleset")
    return table_page(
        request, template="workloads/ruleset_list.html", table_class=RuleSetTable,
        queryset=selectors.rule_set_list(user=request.user), filterset_class=RuleSetFilterSet,
        csv_name="rule-sets", dropdown_fields=["cluster"], context={"clusters": clusters},
    )


def _configurable_clusters(user, model: str) -> list[Cluster]:
    return [c for c in pool_selectors.cluster_list(user=user) if services.may_configure(user, c, model, "add")]


def _may_any(user, model: str) -> bool:
    return bool(_configurable_clusters(user, model))


# ---------------------------------------------------------------------------------------------------
# A pool's platforms

@login_required
def pool_platforms(request, pk: int):
    pool = _pool(request, pk)
    data = selectors.pool_platforms(user=request.user, pool=pool)
    return render(request, "workloads/pool_platforms.html", {
        "pool": pool, "data": data, "live_clusters": [pool.cluster_id],
        "can_change": services.may_configure(request.user, pool.cluster, "platform", "change"),
    })


@login_required
def platform_detail(request, pk: int):
    platform = get_object_or_404(selectors.platform_list(user=request.user), pk=pk)
    config = selectors.platform_config(platform=platform)
    all_nodes = selectors.pool_node_views(pool=platform.pool)
    member_names = {n.name for n in engine.platform_nodes(node_selector=platform.node_selector,
                                                          tolerations=platform.tolerations, nodes=all_nodes)}
    excluded = [(n, engine.node_exclusion_reason(node_selector=platform.node_selector,
                                                 tolerations=platform.tolerations, node=n))
                for n in all_nodes if n.name not in member_names]
    # The templates merged as a workload with the default variables would get them (WF_* shown as names).
    preview, preview_error = None, ""
    try:
        variables = engine.resolve_variables(pool_defaults=config.pool_defaults,
                                             platform_defaults=config.platform_defaults, user_values={})
        variables |= {name: f"<{name}>" for name in engine.WF_VARIABLES}
        merged = engine.merge_templates(config.templates)
        preview = as_yaml(engine.substitute(merged, variables, template=" + ".join(n for n, _ in config.templates)))
    except engine.TemplateError as exc:
        preview_error = str(exc)
    return render(request, "workloads/platform_detail.html", {
        "platform": platform, "pool": platform.pool, "config": config,
        "members": [n for n in all_nodes if n.name in member_names], "excluded": excluded,
        "is_default": selectors.pool_settings(pool=platform.pool).default_platform_id == platform.pk,
        "preview": preview, "preview_error": preview_error,
        "violations": engine.platform_violations(engine.merge_templates(config.templates) if not preview_error else {},
                                                 privileged_allowed=platform.privileged_allowed,
                                                 host_network_allowed=platform.host_network_allowed,
                                                 allowed_mounts=platform.allowed_mounts),
        # What its own templates ask beyond its pod security level (every submission would be refused).
        "security_violations": _template_security(config.templates, platform.pod_security_level)
        if not preview_error else [],
        "can_change": services.may_configure(request.user, platform.pool.cluster, "platform", "change"),
    })


def _template_security(templates, level: str) -> list:
    merged = engine.merge_templates(templates)
    return podsecurity.check_pod(merged.get("spec") or {}, merged.get("metadata") or {}, level=level)


def _platform_values(form) -> dict:
    data = dict(form.cleaned_data)
    data.pop("version", None)
    if not data.get("pod_security_level"):
        data.pop("pod_security_level", None)  # a new platform takes its pool's level; an edit keeps its own
    return data


@login_required
def platform_create(request, pk: int):
    pool = _pool(request, pk)
    if not services.may_configure(request.user, pool.cluster, "platform", "add"):
        raise PermissionDenied("Only system administrators may add platforms.")
    form = PlatformForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        platform = _save(request, form, lambda: services.platform_create(actor=request.user, pool=pool,
                                                                         **_platform_values(form)),
                         f"Platform '{form.cleaned_data['name']}' added to pool '{pool.name}'.")
        if platform is not None:
            return redirect("platform-detail", platform.pk)
    return render(request, "workloads/form.html", {"form": form, "title": f"Add a platform to pool {pool.name}",
                                                   "cancel": ("pool-platforms", pool.pk)})


@login_required
def platform_edit(request, pk: int):
    platform = get_object_or_404(selectors.platform_list(user=request.user), pk=pk)
    if not services.may_configure(request.user, platform.pool.cluster, "platform", "change"):
        raise PermissionDenied("Only system administrators may change platforms.")
    is_default = selectors.pool_settings(pool=platform.pool).default_platform_id == platform.pk
    initial = {
        "name": platform.name, "description": platform.description, "node_selector": as_yaml(platform.node_selector),
        "tolerations": as_yaml(platform.tolerations), "pod_security_level": platform.pod_security_level,
        "privileged_allowed": platform.privileged_allowed,
        "host_network_allowed": platform.host_network_allowed, "allowed_mounts": as_lines(platform.allowed_mounts),
        "default_variables": as_yaml(platform.default_variables),
        "override_templates": as_lines(t.name for t in platform.ordered_templates()),
        "rule_sets": as_lines(r.name for r in platform.ordered_rule_sets()),
        "make_default": is_default, "version": platform.version,
    }
    form = PlatformForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        values = _platform_values(form)
        make_default = values.pop("make_default")

        def save():
            saved = services.platform_update(actor=request.user, platform=platform,
                                             expected_version=form.cleaned_data.get("version"), **values)
            if make_default and not is_default:
                services.pool_settings_update(actor=request.user, pool=platform.pool, default_platform=saved)
            return saved

        saved = _save(request, form, save, f"Platform '{values['name']}' saved.")
        if saved is not None:
            return redirect("platform-detail", saved.pk)
    return render(request, "workloads/form.html", {"form": form, "title": f"Edit platform {platform.name}",
                                                   "cancel": ("platform-detail", platform.pk)})


@login_required
def platform_delete(request, pk: int):
    platform = get_object_or_404(selectors.platform_list(user=request.user), pk=pk)
    if not services.may_configure(request.user, platform.pool.cluster, "platform", "delete"):
        raise PermissionDenied("Only system administrators may delete platforms.")
    form = ConfirmDeleteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        pool_pk = platform.pool_id
        if _save(request, form, lambda: services.platform_delete(actor=request.user, platform=platform) or True,
                 f"Platform '{platform.name}' deleted."):
            return redirect("pool-platforms", pool_pk)
    return render(request, "workloads/confirm_delete.html", {
        "form": form, "what": f"platform {platform.name} of pool {platform.pool.name}",
        "cancel": ("platform-detail", platform.pk)})


@login_required
def pool_settings_edit(request, pk: int):
    pool = _pool(request, pk)
    if not services.may_configure(request.user, pool.cluster, "poolworkloadsettings", "change"):
        raise PermissionDenied("Only system administrators may change a pool's workload settings.")
    settings = selectors.pool_settings(pool=pool)
    platforms = list(pool.platforms.order_by("name"))
    initial = {
        "default_platform": settings.default_platform.name if settings.default_platform_id else "",
        "default_variables": as_yaml(settings.default_variables),
        "pod_security_level": settings.pod_security_level,
        "common_templates": as_lines(t.name for t in (settings.ordered_templates() if settings.pk else [])),
        "rule_sets": as_lines(r.name for r in (settings.ordered_rule_sets() if settings.pk else [])),
        "version": settings.version if settings.pk else None,
    }
    form = PoolSettingsForm(request.POST or None, initial=initial, platforms=platforms)
    if request.method == "POST" and form.is_valid():
        values = dict(form.cleaned_data)
        version = values.pop("version", None)
        if not values.get("pod_security_level"):
            values.pop("pod_security_level", None)  # not sent: the level stays as it is
        if _save(request, form, lambda: services.pool_settings_update(actor=request.user, pool=pool,
                                                                      expected_version=version, **values),
                 f"Workload settings of pool '{pool.name}' saved."):
            return redirect("pool-platforms", pool.pk)
    return render(request, "workloads/form.html", {"form": form, "title": f"Workload settings of pool {pool.name}",
                                                   "cancel": ("pool-platforms", pool.pk)})


# ---------------------------------------------------------------------------------------------------
# Pod templates and rule sets

def _cluster_for_add(request, model: str) -> Cluster:
    clusters = _configurable_clusters(request.user, model)
    wanted = request.GET.get("cluster") or request.POST.get("cluster")
    chosen = next((c for c in clusters if str(c.pk) == str(wanted)), None) if wanted else (
        clusters[0] if len(clusters) == 1 else None)
    if not clusters:
        raise PermissionDenied("Only system administrators may add these.")
    if chosen is None:
        raise PermissionDenied("Choose a cluster you may configure (?cluster=<id>).")
    return chosen


@login_required
def pod_template_detail(request, pk: int):
    template = get_object_or_404(selectors.pod_template_list(user=request.user), pk=pk)
    return render(request, "workloads/podtemplate_detail.html", {
        "template": template, "body": as_yaml(template.body) or "{}", "users": services.in_use_by(template),
        "can_change": services.may_configure(request.user, template.cluster, "podtemplate", "change"),
    })


@dataclass(frozen=True)
class _Library:
    """Pod templates and rule sets: the same add / edit / delete pages, told apart by these."""

    model: str  # its name in the permission rules
    label: str  # "Pod template"
    url: str  # the prefix of its URL names
    form: type
    document: str  # the YAML field: "body" or "rules"
    owner: str  # the services' keyword for one of them: "template" or "rule_set"
    list: Callable[..., Any]
    create: Callable[..., Any]
    update: Callable[..., Any]
    delete: Callable[..., Any]

    @property
    def plural(self) -> str:
        return f"{self.label.lower()}s"


POD_TEMPLATES = _Library("podtemplate", "Pod template", "podtemplate", PodTemplateForm, "body", "template",
                         selectors.pod_template_list, services.pod_template_create, services.pod_template_update,
                         services.pod_template_delete)
RULE_SETS = _Library("resourcevalidationruleset", "Rule set", "ruleset", RuleSetForm, "rules", "rule_set",
                     selectors.rule_set_list, services.rule_set_create, services.rule_set_update,
                     services.rule_set_delete)


def _library_create(request, kind: _Library):
    cluster = _cluster_for_add(request, kind.model)
    form = kind.form(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        obj = _save(request, form, lambda: kind.create(
            actor=request.user, cluster=cluster, name=data["name"], description=data["description"],
            **{kind.document: data[kind.document]}), f"{kind.label} '{data['name']}' added.")
        if obj is not None:
            return redirect(f"{kind.url}-detail", obj.pk)
    return render(request, "workloads/form.html", {
        "form": form, "title": f"Add a {kind.label.lower()} to cluster {cluster.name}",
        "cancel": (f"{kind.url}-list", None), "cluster": cluster})


def _library_object(request, kind: _Library, pk: int, action: str):
    obj = get_object_or_404(kind.list(user=request.user), pk=pk)
    if not services.may_configure(request.user, obj.cluster, kind.model, action):
        raise PermissionDenied(f"Only system administrators may {action} {kind.plural}.")
    return obj


def _library_edit(request, kind: _Library, pk: int):
    obj = _library_object(request, kind, pk, "change")
    form = kind.form(request.POST or None, initial={
        "name": obj.name, "description": obj.description, kind.document: as_yaml(getattr(obj, kind.document)),
        "version": obj.version})
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        version = data.pop("version", None)
        saved = _save(request, form, lambda: kind.update(
            actor=request.user, expected_version=version, **{kind.owner: obj}, **data),
            f"{kind.label} '{data['name']}' saved.")
        if saved is not None:
            return redirect(f"{kind.url}-detail", saved.pk)
    return render(request, "workloads/form.html", {"form": form, "title": f"Edit {kind.label.lower()} {obj.name}",
                                                   "cancel": (f"{kind.url}-detail", obj.pk)})


def _library_delete(request, kind: _Library, pk: int):
    obj = _library_object(request, kind, pk, "delete")
    form = ConfirmDeleteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if _save(request, form, lambda: kind.delete(actor=request.user, **{kind.owner: obj}) or True,
                 f"{kind.label} '{obj.name}' deleted."):
            return redirect(f"{kind.url}-list")
    return render(request, "workloads/confirm_delete.html", {
        "form": form, "what": f"{kind.label.lower()} {obj.name}", "cancel": (f"{kind.url}-detail", obj.pk)})


@login_required
def pod_template_create(request):
    return _library_create(request, POD_TEMPLATES)


@login_required
def pod_template_edit(request, pk: int):
    return _library_edit(request, POD_TEMPLATES, pk)


@login_required
def pod_template_delete(request, pk: int):
    return _library_delete(request, POD_TEMPLATES, pk)


@login_required
def rule_set_detail(request, pk: int):
    rule_set = get_object_or_404(selectors.rule_set_list(user=request.user), pk=pk)
    return render(request, "workloads/ruleset_detail.html", {
        "rule_set": rule_set, "rules": rule_set.parsed_rules(), "users": services.in_use_by(rule_set),
        "can_change": services.may_configure(request.user, rule_set.cluster, "resourcevalidationruleset", "change"),
    })


@login_required
def rule_set_create(request):
    return _library_create(request, RULE_SETS)


@login_required
def rule_set_edit(request, pk: int):
    return _library_edit(request, RULE_SETS, pk)


@login_required
def rule_set_delete(request, pk: int):
    return _library_delete(request, RULE_SETS, pk)


# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
def _api_client(cluster):
    return api_client_for(cluster)


@login_required
@reads_memo
def workload_list(request):
    rows = selectors.workload_list(user=request.user)
    # Which of the rows shown the user may stop (read with the page's rows; the CSV has no Stop).
    stoppable = None if wants_csv(request) else Workload.objects.restrict(request.user, "stop").filter(kind=JOB_KIND)
    shown = rows if request.GET else ended_filtered(rows, WorkloadPageFilterSet.ended_default)
    return table_page(
        request, template="workloads/workload_list.html", table_class=WorkloadTable, queryset=shown,
        filterset_class=WorkloadPageFilterSet, csv_name="workloads", default_order="age",
        dropdown_fields=["cluster", "project", "pool", "phase", "priority_class"],
        table_kwargs={"stoppable": stoppable, "user": request.user,
                      "later": not wants_csv(request)},
        context={"live_clusters": list(rows.order_by().values_list("cluster_id", flat=True).distinct()) or
                 list(_visible_cluster_ids(request.user)),
                 "can_submit": selectors.submittable_projects(user=request.user).exists()},
    )


ESTIMATES_MOST = 500  # the largest page of the workloads table


@login_required
@reads_memo
def workload_start_estimates(request):
    """The cells the workloads table's page leaves to after it (WorkloadTable.LATER: the start estimates,
    "Why is it waiting?", what it waits for, the queue position with KAI's queue turn) of its waiting rows
    (`?ids=1,2,…`, those the user may see; `&cells=` which of them the page shows, all by default), fetched
    after the page (htmx): each replaces its cell's content by its id (`#start-estimate-<id>`, …, out of band)."""
    ids = []
    for part in request.GET.get("ids", "").split(",")[:ESTIMATES_MOST]:
        if is_digits(part.strip()):
            ids.append(int(part))
    cells = [c for c in WorkloadTable.LATER if c in request.GET.get("cells", "").split(",")] or list(WorkloadTable.LATER)
    rows = list(selectors.workload_list(user=request.user).filter(pk__in=ids).order_by("pk"))
    if not rows:
        raise Http404("No workload of these you may see.")
    selectors.workloads_enrich(rows, user=request.user, gpu=False, estimates="start_estimate" in cells)
    table = WorkloadTable(rows, user=request.user)
    return render(request, "workloads/_workload_estimates.html",
                  {"rows": [[table.later_html(w, c) for c in cells] for w in rows]})


@login_required
@reads_memo
def project_start_estimates_section(request, pk: int):
    """The project page's "When will they start?" section, fetched after the page (htmx) or opened alone."""
    project = get_object_or_404(Project.objects.restrict(request.user, "view"), pk=pk)
    return render(request, "workloads/_start_estimates.html",
                  project_start_estimates_context(user=request.user, project=project))


@login_required
def workload_detail(request, pk: int):
    """One workload: what was asked, what the scheduler decided (its PodGroups' or Kueue Workload's
    conditions, who preempted it, its queue position) and the console's answer to why it waits."""
    workload = get_object_or_404(selectors.workload_list(user=request.user), pk=pk)
    selectors.workloads_enrich([workload], user=request.user)
    template = "workloads/workload_detail.html" + ("#facts" if htmx_partial(request) else "")
    return render(request, template, {
        "workload": workload, "detail": selectors.workload_detail(workload),
        "phase": selectors.display_phase(workload), "pending_reason": selectors.pending_reason(workload),
        "waits_for": selectors.waiting_category_text(workload),
        "can_stop": (workload.is_job and Workload.objects.restrict(request.user, "stop").filter(pk=workload.pk).exists()
                     and selectors.display_phase(workload) not in selectors.ENDED and not workload.stop_requested),
        "timeline": selectors.workload_timeline(workload, user=request.user),
        "live_clusters": [workload.cluster_id],
    })


def _visible_cluster_ids(user):
    return Cluster.objects.restrict(user, "view").values_list("pk", flat=True)


def _request_from(data: dict) -> submission.Request:
    """The submission's request from the form's cleaned data."""
    project = data["project"]
    return submission.Request(
        project=project, pools=submission.pools_from_names(project=project, names=data["pools"]),
        image=data["image"], command=data["command"], platform=data["platform"] or "", cpu=data["cpu"] or "",
        memory=data["memory"] or "", gpus=data["gpus"] or 0, storage=data["storage"] or "",
        gpu_profile=data.get("gpu_profile") or "", gpu_fraction=data.get("gpu_fraction") or "",
        priority_class=data["priority_class"], pods=data["pods"] or 1, name=data["name"] or "",
        active_deadline_seconds=data["max_run_minutes"] * 60 if data.get("max_run_minutes") else None)


def _submit_form(request) -> SubmitForm:
    """The submission form of the page and of its field checks. `?project=` chooses the project; when
    the project changed since its pools were chosen (`pools_for`), they start again from its priority
    list."""
    projects = selectors.submittable_projects(user=request.user)
    if not projects.exists():
        raise PermissionDenied("Submitting workloads needs the researcher or project administrator role on a project.")
    chosen = projects.filter(pk=request.GET.get("project")).first() if is_digits(request.GET.get("project", "")) else None
    chosen = chosen or projects.first()
    initial = {"project": chosen.pk, "pools": [p.name for p in selectors.default_pools(chosen)]}
    data = None
    if request.method == "POST":
        data = request.POST.copy()
        if data.get("pools_for") and data.get("pools_for") != data.get("project") \
                and request.POST.get("action") in ("refresh", None):
            project = projects.filter(pk=data.get("project")).first() if is_digits(str(data.get("project"))) else None
            for key in [k for k in data if k == "pools" or k.startswith("pools_") and k != "pools_for"]:
                del data[key]
            for index, pool in enumerate(selectors.default_pools(project) if project else []):
                data[f"pools_{index}"] = pool.name
            data["platform"] = ""
    return SubmitForm(data, projects=projects, user=request.user, initial=initial)


def _dry_run(form: SubmitForm, actor, *, partial: bool = False):
    """Preview's steps on the form (nothing is created): (preview, step); a refusal lands on the form's
    fields. `partial`: the form may still lack fields (a field checked as it is filled): the steps run
    on what it holds, and the first one says what is missing or wrong."""
    if not partial and not form.is_valid():
        return None, ""
    data = form.cleaned_data
    if partial:
        # A field not (validly) filled yet counts as its initial value, as on a new form.
        defaults = {name: field.initial if field.initial is not None else "" for name, field in form.fields.items()}
        defaults.update(command=[], pools=[], project=None)
        data = {**defaults, **{k: v for k, v in data.items() if v is not None}}
        if data.get("project") is None:
            return None, ""
    try:
        req = _request_from(data)
        return submission.workload_preview(actor=actor, request=req), ""
    except submission.SubmissionRefused as exc:
        form_errors_from(form, exc)
        return None, exc.step
    except ValidationError as exc:
        form_errors_from(form, exc)
    return None, ""


def _submit_context(form, **extra) -> dict:
    return {"form": form, "steps": submission.STEPS, "check_url": reverse("workload-submit-check"),
            "placement": SubmitForm.PLACEMENT, "pools_for": form.chosen_project.pk if form.chosen_project else "",
            **extra}


@login_required
def workload_submit(request):
    """Submit a workload: Preview runs every step and shows the Job as YAML (nothing is created);
    Submit runs them again and creates it. Without JavaScript, "Show the pools and platforms of these
    choices" (action=refresh) brings the choices of the project and pools chosen; with it, they follow as
    they change (workload_submit_check)."""
    form = _submit_form(request)
    preview = verdict = None
    step = ""
    action = request.POST.get("action", "preview")
    if request.method == "POST" and action == "refresh":
        # The choices of the project and pools chosen, nothing checked yet (the page without JavaScript).
        values = {n: form.data.get(n) for n in form.fields if n != "pools"}
        form = SubmitForm(projects=form.fields["project"].queryset, user=request.user,
                          initial={**values, "pools": form.chosen_pool_names()})
    if request.method == "POST" and action != "refresh" and form.is_valid():
        try:
            if action == "submit":
                req = _request_from(form.cleaned_data)
                with _api_client(req.project.cluster) as api_client:
                    done = submission.workload_submit(actor=request.user, request=req, api_client=api_client)
                messages.success(request, f"Workload {done.name} submitted to {done.namespace} "
                                          f"(pools {', '.join(done.pools)}). It appears below within seconds.")
                return redirect(reverse("workload-list") + f"?project={req.project.pk}")
            preview, step = _dry_run(form, request.user)
            if preview is not None:
                verdict = _verdict(form, request.user, preview)
        except submission.SubmissionRefused as exc:
            step = exc.step
            form_errors_from(form, exc)
        except ValidationError as exc:
            form_errors_from(form, exc)
        except PermissionDenied:
            raise
        except Exception as exc:  # noqa: BLE001 - an unreachable cluster is reported on the page

            form.add_error(None, f"The cluster could not be reached: {api_error_message(exc)}. Nothing was created.")
    return render(request, "workloads/submit.html", _submit_context(form, preview=preview, step=step, verdict=verdict))


def _verdict(form: SubmitForm, actor, preview):
    """The dry run's verdict of a previewed submission (workloads.forecast): would it start now, wait (for
    what, until when) or never fit. Its failure never hides the preview: it is said in words instead."""
    try:
        return forecast.submission_verdict(user=actor, request=_request_from(form.cleaned_data), preview=preview)
    except Exception as exc:  # noqa: BLE001 - the Job preview stands without it
        logger.exception("dry run of %s failed", preview.name)
        return {"error": f"Whether it would start now could not be worked out: {exc}"}


# A refusal of the resource validation step concerns what is asked per pod: it shows at the field checked
# when it names the field's variable (a rule of the platform's: at the platform, whatever it names).
_RESOURCE_VARIABLES = {"cpu": "USER_CPU", "memory": "USER_MEMORY", "gpus": "USER_GPU", "storage": "USER_STORAGE"}


def _concerns(field: str, message: str) -> bool:
    if field == "platform":
        return True
    variable = _RESOURCE_VARIABLES.get(field)
    return variable is not None and (variable in message or not any(v in message for v in _RESOURCE_VARIABLES.values()))


@login_required
@require_POST
def workload_submit_check(request):
    """One field of the submission form checked as it is filled (htmx, before Preview): the same form and
    the same steps as Preview (`_dry_run`), on what the form holds so far; answers that field's part of
    the page with its errors (`?field=image`), or the project, pools and platform together
    (`?field=placement`: the pools follow the project, the platforms the pools)."""
    form = _submit_form(request)
    name = request.GET.get("field") or "placement"
    names = SubmitForm.PLACEMENT if name == "placement" else (name,)
    if any(n not in form.fields for n in names):
        return HttpResponse(f"No field {name!r} in the submission form.", status=400,
                            content_type="text/plain; charset=utf-8")
    form.is_valid()
    if not any(form.errors.get(n) for n in names):
        # Only the fields checked keep errors: the others may simply not be filled yet.
        _dry_run(form, request.user, partial=True)
        for message in [e.removeprefix("resources: ") for e in form.non_field_errors() if e.startswith("resources: ")]:
            if _concerns(names[-1], message):
                form.add_error(names[-1], message)
    context = _submit_context(form)
    if name == "placement":
        return render(request, "workloads/submit.html#placement", context)
    return render(request, "workloads/submit.html#field", {**context, "field": form[name], "checked": True})


def _stop_next(request, workload) -> str:
    """Where to go after the confirmation: the page it was asked from (this site's), else the workload's."""
    target = (request.POST.get("next") or request.GET.get("next") or request.headers.get("HX-Current-URL", "")
              or request.headers.get("Referer", ""))
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return reverse("workload-detail", args=[workload.pk])


@login_required
def workload_stop(request, pk: int):
    """Stop a workload, after asking: GET is the confirmation naming what stops (its pods, its GPUs, its
    project), as a page or (htmx) loaded into the page; POST stops it (its Job and pods deleted in the cluster;
    the workload keeps its row, its page and its timeline, which says who stopped it)."""
    workload = get_object_or_404(selectors.workload_list(user=request.user), pk=pk)
    submission.require_stop(request.user, workload)
    if request.method == "GET":
        if request.GET.get("cancel"):
            return HttpResponse("")  # the confirmation in the page, dismissed
        phase = selectors.display_phase(workload)
        pods = selectors.workload_detail(workload).pods
        template = "workloads/confirm_stop.html" + ("#confirm" if request.htmx else "")
        return render(request, template, {
            "workload": workload, "phase": phase, "ended": phase in selectors.ENDED,
            "pods": pods, "running": sum(1 for p in pods if p.phase == "Running"),
            "gpus": selectors.gpus_text(workload.gpus), "next": _stop_next(request, workload)})
    if request.method != "POST":
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    try:
        with _api_client(workload.cluster) as api_client:
            services.workload_stop(actor=request.user, workload=workload, api_client=api_client)
        messages.success(request, f"Workload {workload.name} is being stopped: its Job and pods are deleted in the "
                                  f"cluster. It stays listed, Stopped, with its timeline.")
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    except PermissionDenied:
        raise
    except Exception as exc:  # noqa: BLE001

        messages.error(request, f"The cluster could not be reached: {api_error_message(exc)}. Nothing was stopped.")
    url = _stop_next(request, workload)
    if getattr(request, "htmx", None):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


@login_required
def pool_access(request, pk: int):
    """Who may submit to a pool; editing for system administrators and administrators of its cluster."""
    pool = get_object_or_404(NodePool.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
    can_change = submission.may_change_access(request.user, pool)
    row = getattr(pool, "access", None)
    form = PoolAccessForm(request.POST or None, pool=pool, instance=row)
    if request.method == "POST":
        if not can_change:
            raise PermissionDenied("Only system administrators and administrators of the pool's cluster may change "
                                   "who submits to it.")
        if form.is_valid():
            try:
                submission.pool_access_set(actor=request.user, pool=pool, **form.cleaned_data)
                messages.success(request, f"Access to pool {pool.name} saved.")
                return redirect("pool-access", pool.pk)
            except ValidationError as exc:
                form_errors_from(form, exc)
    return render(request, "workloads/pool_access.html", {"pool": pool, "form": form, "can_change": can_change,
                                                           "access": row})
