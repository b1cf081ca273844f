"""Submitting a workload (OSMO's flow) and stopping one; editing who may submit to a pool.

`workload_preview` runs the steps and returns the Job it would create (the dry run); `workload_submit`
runs the same steps and creates the Job in the project's namespace through the official client;
`workload_stop` deletes a Job. The steps, in order, each refusing with words a researcher understands
and the field they concern (nothing is created on a refusal):

1. access: the project role, and every pool of the list open to the project (workloads.rules);
2. resource validation: the platform's rule sets against the resources asked for, and its nodes;
3. templates: the pool's common templates, then the platform's, each substituted and merged in order
   (a template naming a node, a scheduler or a priority is refused: workloads.podsecurity.scheduling_bypass);
4. pod security: the rendered Job's pod against every control of the Pod Security Standards level of the
   pools' platforms (workloads.podsecurity; the strictest level when the list has several pools);
5. platform: what the pod asks inside the privileged level (privileged, host network, host mounts)
   against the platform's allowances;
6. render: the Job (workloads.render), at most 1.5 MiB, created by the API server on submit.

The preview also says, in words, how the cluster's scheduler will take the Job (`Preview.scheduling`): with
KAI Scheduler the one pool it is queued in (KAI has no node-pool priority list) and, for several pods, that
they run together or not at all; with Kueue the LocalQueue it waits in.
"""
from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from access.rules import ScopeType, role_grants, user_grants
from audit.models import AuditEvent
from audit.services import audit_record, snapshot
from common import parsing
from common.words import noun
from enforcers import desired
from kube import gpu as kube_gpu
from kube import reference
from kube.client import FIELD_MANAGER, refusal_from
from kube.quantity import parse_quantity
from nodepools.models import NodePool
from workloads import podsecurity, render, selectors, shell
from workloads.models import PoolAccess, Workload
from workloads.rules import may_submit_to_project, submit_refusal

PRIORITY_CLASSES = tuple(name for name, _, _ in desired.PRIORITY_CLASSES)
PRIORITY_VALUES = {name: value for name, value, _ in desired.PRIORITY_CLASSES}
STEPS = ("access", "resource validation", "templates", "pod security", "platform", "render")
# What the API server stores of one object at most (etcd's request limit, 1.5 MiB): a Job over it is refused.
MAX_OBJECT_BYTES = 3 * 1024 * 1024 // 2
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


class SubmissionRefused(ValidationError):
    """A step of the submission refused: `step` (one of STEPS), the field it concerns (for the pod security
    step, the path in the Job of the first offending field) and, with `errors`, every field refused."""

    def __init__(self, step: str, field_name: str, message: str, errors: dict[str, list[str]] | None = None) -> None:
        self.step = step
        self.field_name = field_name
        self.text = message
        self.errors = errors or {field_name: [message]}
        super().__init__(self.errors)


@dataclass
class Request:
    """What the researcher asked for, checked for form (not yet against the pools)."""

    project: Any
    pools: list[NodePool]
    image: str
    command: list[str] = field(default_factory=list)
    platform: str = ""
    cpu: str = ""
    memory: str = ""
    gpus: int = 0
    # A MIG profile (`gpus` slices of it per pod) or a KAI GPU fraction of one GPU per pod (kube.gpu).
    gpu_profile: str = ""
    gpu_fraction: str = ""
    storage: str = ""
    priority_class: str = "train"
    pods: int = 1
    name: str = ""
    # The most it may run (Job spec.activeDeadlineSeconds; None: no limit): the start estimates of others use it.
    active_deadline_seconds: int | None = None
    # Set only by the demo's driver (workloads.demo), never by the form or the API: pod annotations the
    # emulator reads (how long the pods run, their GPU utilization).
    demo_pod_annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class Preview:
    job: dict[str, Any]
    yaml: str
    namespace: str
    name: str
    pools: list[str]
    platform: str
    variables: dict[str, str]
    # The pool the scheduler queues it in (KAI: the first of the list, its queue's pool; else empty), and
    # sentences saying how the scheduler takes it.
    queued_in: str = ""
    scheduling: list[str] = field(default_factory=list)


def scheduling_notes(*, enforcer: str, pools: list[str], queue: str, pods: int, job: dict[str, Any]) -> list[str]:
    """What the preview says about the scheduler's handling of the Job."""
    notes: list[str] = []
    if enforcer == "kai":
        note = f"KAI Scheduler queues it in pool {pools[0]} (queue {queue})."
        if len(pools) > 1:
            note += (f" KAI has no node-pool priority list: a workload waits in its queue's pool, so "
                     f"{', '.join(pools[1:])} will not be tried.")
        notes.append(note)
        if pods > 1:
            notes.append(f"Its {pods} pods are scheduled together or not at all: KAI makes the Job one PodGroup "
                         f"with minMember {pods} ({render.KAI_MIN_MEMBER_ANNOTATION}).")
    elif enforcer == "kueue":
        which = "its pod" if pods == 1 else f"all {pods} {noun(pods, 'pod')} at once"
        notes.append(f"Kueue admits it from LocalQueue {queue}, {which}, in the first of its "
                     f"pools ({', '.join(pools)}) with quota, in the project's pool order.")
    if job["spec"].get("podFailurePolicy"):
        notes.append("A pod the scheduler evicts (preemption, reclaim) or a node drain removes is replaced; it is "
                     "not counted as a failure of the workload (podFailurePolicy: Ignore on DisruptionTarget).")
    return notes


def _check_form(req: Request) -> None:
    errors: dict[str, list[str]] = {}
    for name in ("image", "command", "platform", "cpu", "memory", "storage", "name"):
        try:  # the same rule as the API's parsers and the pages' middleware (common/parsing.py)
            value = getattr(req, name)
            parsing.check_value(list(value) if isinstance(value, tuple) else value, field=name, limit=2)
        except parsing.InputError as exc:
            errors[name] = [exc.message]
    if errors:
        raise ValidationError(errors)
    try:
        req.command = shell.command_from(list(req.command or []))
    except shell.CommandError as exc:
        errors["command"] = [str(exc)]
    if not req.image or not req.image.strip():
        errors["image"] = ["Give the container image to run, e.g. nvcr.io/nvidia/pytorch:24.05-py3."]
    elif reference.reference_errors(req.image.strip()):
        errors["image"] = [f"{req.image.strip()[:200]!r} is not an image reference: "
                           f"{reference.reference_errors(req.image.strip())[0]} (e.g. nvcr.io/nvidia/pytorch:24.05-py3, "
                           "busybox:1.36, registry.example.com:5000/team/train@sha256:…)."]
    if req.priority_class not in PRIORITY_CLASSES:
        errors["priority_class"] = [f"Choose one of {', '.join(PRIORITY_CLASSES)}."]
    if not isinstance(req.pods, int) or isinstance(req.pods, bool) or not 1 <= req.pods <= 1000:
        errors["pods"] = ["The number of pods is a whole number from 1 to 1000."]
    if not isinstance(req.gpus, int) or isinstance(req.gpus, bool) or not 0 <= req.gpus <= 64:
        errors["gpus"] = ["GPUs per pod is a whole number from 0 to 64."]
    req.gpu_profile = str(req.gpu_profile or "").strip()
    req.gpu_fraction = str(req.gpu_fraction or "").strip()
    if req.gpu_profile:
        profile = kube_gpu.parse_mig_profile(req.gpu_profile)
        if profile is None or len(req.gpu_profile) > 32:
            errors["gpu_profile"] = [f"{req.gpu_profile[:40]!r} is not a MIG profile: <slices>g.<memory>gb, "
                                     "e.g. 1g.10gb or 3g.40gb."]
        else:
            req.gpu_profile = profile.name
    if req.gpu_fraction:
        share = kube_gpu.fraction_errors({kube_gpu.ANNOTATION_GPU_FRACTION: req.gpu_fraction})
        if share:
            errors["gpu_fraction"] = [f"A GPU fraction {share[kube_gpu.ANNOTATION_GPU_FRACTION]}."]
        elif req.gpu_profile:
            errors["gpu_fraction"] = ["Ask either a MIG profile or a GPU fraction, not both."]
        elif req.gpus not in (0, 1):
            errors["gpu_fraction"] = ["A GPU fraction is a share of one GPU per pod: leave GPUs at 0 or 1."]
    for name in ("cpu", "memory", "storage"):
        value = getattr(req, name)
        if value in ("", None):
            continue
        try:  # ASCII digits, a Kubernetes quantity, within what the schedulers' arithmetic holds
            amount = parsing.parse_quantity(str(value), field=name)
        except parsing.InputError as exc:  # an unparsable quantity is the user's input error
            errors[name] = [exc.message]
            continue
        if amount <= 0:
            errors[name] = ["Must be more than zero."]
    deadline = req.active_deadline_seconds
    if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool)
                                 or not 60 <= deadline <= 30 * 24 * 3600):
        errors["active_deadline_seconds"] = ["The maximum run time is a whole number of seconds from 60 (a minute) "
                                             "to 2592000 (30 days), or empty for no limit."]
    if req.name and (len(req.name) > 52 or not _NAME.match(req.name)):
        errors["name"] = ["A workload name is lowercase letters, digits and '-', starting and ending with a "
                          "letter or digit, at most 52 characters."]
    if not req.pools:
        errors["pools"] = ["Choose at least one node pool."]
    elif len({p.pk for p in req.pools}) != len(req.pools):
        errors["pools"] = ["A pool appears twice in the list."]
    elif any(p.cluster_id != req.project.cluster_id for p in req.pools):
        errors["pools"] = ["Every pool must be in the project's cluster."]
    if errors:
        raise ValidationError(errors)


def _steps(*, actor: Any, req: Request) -> Preview:
    if not may_submit_to_project(actor, req.project):
        raise PermissionDenied(f"You may not submit workloads to project {req.project.name}: that needs the "
                               "researcher or project administrator role on it.")
    _check_form(req)
    # 1. access
    for pool in req.pools:
        refusal = submit_refusal(actor, pool, req.project)
        if refusal:
            raise SubmissionRefused("access", "pools", refusal)
    namespace = selectors.project_namespace(req.project)
    if not namespace:
        raise SubmissionRefused("access", "project", f"Project {req.project.name} has no namespace to run in.")
    first = req.pools[0]
    name = req.name or f"{req.project.name[:40]}-{secrets.token_hex(3)}"
    plan = selectors.platform_plan(pool=first, platform=req.platform, pools=req.pools)
    if plan.error:
        raise SubmissionRefused("platform", "platform", plan.error)
    # A MIG profile's slices or a fraction are not whole GPUs: USER_GPU (templates, rules) stays 0 for them.
    whole_gpus = req.gpus if req.gpus and not (req.gpu_profile or req.gpu_fraction) else ""
    user_values = {k: str(v) for k, v in (("USER_CPU", req.cpu), ("USER_MEMORY", req.memory),
                                          ("USER_GPU", whole_gpus),
                                          ("USER_STORAGE", req.storage)) if v not in ("", None)}
    variables = plan.variables(user_values)
    variables.update({"WF_ID": name, "WF_UUID": str(uuid.uuid4()), "WF_TASK_NAME": "main",
                      "WF_SUBMITTED_BY": getattr(actor, "username", "") or "", "WF_POOL": first.name,
                      "WF_PLATFORM": plan.name})
    # 2. resource validation
    failure = plan.validate(variables)
    if failure:
        raise SubmissionRefused("resource validation", "resources", failure)
    shape_refusal = selectors.gpu_shape_refusal(req.pools, profile=req.gpu_profile, fraction=req.gpu_fraction,
                                                enforcer=selectors.enforcer_of(req.project.cluster))
    if shape_refusal:
        raise SubmissionRefused("resource validation", *shape_refusal)
    # 3. templates
    pod_spec, error = plan.pod_spec(variables)
    if error:
        raise SubmissionRefused("templates", "platform", error)
    # The Job (pure): the pod after every template is merged, as the cluster would run it.
    enforcer = selectors.enforcer_of(req.project.cluster)
    queue = ""
    if enforcer == "kai":
        queue = desired.kai_project_queue(req.project.name, first.name)
    elif enforcer == "kueue":
        queue = desired.kueue_local_queue(req.project.name)
    spec = render.JobSpec(
        name=name, namespace=namespace, project=req.project.name, image=req.image.strip(),
        command=tuple(req.command), pods=req.pods, priority_class=req.priority_class,
        pools=tuple(selectors.pool_targets(req.pools, platforms=plan.per_pool)),
        other_pool_labels=tuple(selectors.pool_labels(req.project.cluster)),
        platform=plan.name, platform_tolerations=tuple(plan.tolerations), pod_spec=pod_spec,
        pod_metadata=plan.pod_metadata,
        cpu=variables.get("USER_CPU", "1"), memory=variables.get("USER_MEMORY", "1Gi"),
        gpus=(max(req.gpus, 1) if req.gpu_profile else int(parse_quantity(variables.get("USER_GPU", "0") or "0"))),
        gpu_profile=req.gpu_profile, gpu_fraction=req.gpu_fraction,
        storage=variables.get("USER_STORAGE", "") if req.storage or plan.platform else "",
        enforcer=enforcer, queue=queue, submitted_by=getattr(actor, "username", "") or "",
        active_deadline_seconds=req.active_deadline_seconds,
        pod_annotations=tuple(sorted((str(k), str(v)) for k, v in (req.demo_pod_annotations or {}).items())),
    )
    job = render.job(spec)
    # 4. pod security: every control of the level the pools' platforms allow, on the rendered pod
    _check_pod_security(job, plan)
    # 5. platform: what the platform allows inside the privileged level (privileged, host network, host paths);
    # a pool without platforms has no finer allowances: its level alone decides.
    violations = plan.violations(job["spec"]["template"]["spec"]) if plan.platform is not None else []
    if violations:
        raise SubmissionRefused("platform", "platform", "; ".join(violations))
    # 6. render: a Job the API server can store
    size = len(orjson.dumps(job))
    if size > MAX_OBJECT_BYTES:
        raise SubmissionRefused("render", "non_field_errors", f"The Job would be {size} bytes: Kubernetes stores at "
                                f"most {MAX_OBJECT_BYTES} bytes (1.5 MiB) per object. Shorten the command or the "
                                "templates.")
    pools = [p.name for p in req.pools]
    return Preview(job=job, yaml=render.to_yaml(job), namespace=namespace, name=name, pools=pools,
                   platform=plan.name, variables=variables, queued_in=first.name if enforcer == "kai" else "",
                   scheduling=scheduling_notes(enforcer=enforcer, pools=pools, queue=queue, pods=req.pods, job=job))


def _check_pod_security(job: dict[str, Any], plan: Any) -> None:
    """Refuse, naming each control and field, a pod the level of the pools' platforms does not allow."""
    level = plan.security_level
    found = podsecurity.check_job(job, level=level)
    if not found:
        return
    where = f"the {level} level of {plan.security_source}" if plan.security_source else f"the {level} level"
    errors: dict[str, list[str]] = {}
    for violation in found:
        errors.setdefault(violation.path, []).append(f"{violation.control}: {violation.path} {violation.message} "
                                                     f"(Pod Security Standards, {where}).")
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise SubmissionRefused("pod security", first.path, errors[first.path][0] + more, errors=errors)


def workload_preview(*, actor: Any, request: Request) -> Preview:
    """The Job a submission would create, after every step (nothing is written anywhere)."""
    return _steps(actor=actor, req=request)


def workload_submit(*, actor: Any, request: Request, api_client: Any) -> Preview:
    """Run the steps, create the Job in the project's namespace, audit it. The workloads table shows
    it once the sync mirrors it (seconds)."""
    preview = _steps(actor=actor, req=request)
    batch = client.BatchV1Api(api_client)
    try:
        batch.create_namespaced_job(preview.namespace, preview.job, field_manager=FIELD_MANAGER,
                                    _preload_content=False, _request_timeout=(5, 20))
    except ApiException as exc:
        refusal = refusal_from(exc)
        if refusal.status == 409:
            raise SubmissionRefused("render", "name", f"A workload named {preview.name} already exists in "
                                    f"{preview.namespace}: choose another name.") from exc
        where = f" ({refusal.field})" if refusal.field else ""
        raise SubmissionRefused("render", "non_field_errors",
                                f"The cluster refused the Job{where}: {refusal.message}") from exc
    _audit_job(actor, request.project, preview, AuditEvent.Action.CREATE)
    return preview


@transaction.atomic
def _audit_job(actor: Any, project: Any, preview: Preview, action: str) -> None:
    row = Workload(cluster_id=project.cluster_id, namespace=preview.namespace, name=preview.name,
                   pools_tried=preview.pools, platform=preview.platform)
    summary = {"namespace": preview.namespace, "name": preview.name, "project": project.name,
               "pools": preview.pools, "platform": preview.platform,
               "priority_class": preview.job["spec"]["template"]["spec"].get("priorityClassName", ""),
               "pods": preview.job["spec"].get("parallelism"),
               "image": preview.job["spec"]["template"]["spec"]["containers"][0].get("image", "")}
    audit_record(actor=actor, action=action, obj=row, after=summary, object_id=f"{preview.namespace}/{preview.name}")


def require_stop(actor: Any, workload: Workload) -> None:
    """Stopping is for researchers, project administrators and above of the workload's project."""
    if not Workload.objects.restrict(actor, "stop").filter(pk=workload.pk).exists():
        raise PermissionDenied("You may not stop this workload: that needs the researcher or project "
                               "administrator role on its project.")
    if not workload.is_job:
        raise PermissionDenied(f"{workload.name} is not a Job ({workload.origin}): the console stops only Jobs; "
                               f"its owner stops it in the cluster.")


def workload_stop(*, actor: Any, workload: Workload, api_client: Any) -> None:
    """Delete the workload's Job (and, in the background, its pods). Researchers may stop their
    projects' workloads. Already gone counts as stopped."""
    require_stop(actor, workload)
    body = {"propagationPolicy": "Background"}
    if workload.uid:
        body["preconditions"] = {"uid": workload.uid}
    try:
        client.BatchV1Api(api_client).delete_namespaced_job(
            workload.name, workload.namespace, body=body, _preload_content=False, _request_timeout=(5, 20))
    except ApiException as exc:
        if exc.status != 404:
            refusal = refusal_from(exc)
            raise ValidationError({"non_field_errors": [f"The cluster refused to stop it: {refusal.message}"]}) from exc
    with transaction.atomic():
        before = snapshot(workload)
        audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=workload, before=before,
                     object_id=f"{workload.namespace}/{workload.name}")


@transaction.atomic
def pool_access_set(*, actor: Any, pool: NodePool, open_to_cluster: bool, maintenance: bool,
                    maintenance_note: str = "", departments: list | None = None, projects: list | None = None,
                    groups: list | None = None) -> PoolAccess:
    """Set who may submit to a pool (system administrators and department administrators of its cluster)."""
    if actor is not None and not may_change_access(actor, pool):
        raise PermissionDenied("Only system administrators and administrators of the pool's cluster may change "
                               "who submits to it.")
    row = PoolAccess.objects.select_for_update().filter(pool=pool).first()
    before = _access_snapshot(row)
    if row is None:
        row = PoolAccess(pool=pool)
    row.open_to_cluster = open_to_cluster
    row.maintenance = maintenance
    row.maintenance_note = maintenance_note or ""
    row.full_clean()
    departments, projects = list(departments or []), list(projects or [])
    errors = {}
    if any(d.cluster_id != pool.cluster_id for d in departments):
        errors["departments"] = ["Every department must be in the pool's cluster."]
    if any(p.cluster_id != pool.cluster_id for p in projects):
        errors["projects"] = ["Every project must be in the pool's cluster."]
    if errors:
        raise ValidationError(errors)
    row.save()
    row.departments.set(departments)
    row.projects.set(projects)
    row.groups.set(list(groups or []))
    after = _access_snapshot(row)
    if before is not None:
        if after == before:
            return row  # nothing changed: same version, nothing audited
        row.version += 1
        PoolAccess.objects.filter(pk=row.pk).update(version=row.version)
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE if before else AuditEvent.Action.CREATE, obj=row,
                 before=before, after=after)
    return row


def may_change_access(actor: Any, pool: NodePool) -> bool:
    """The rule of PoolAccessQuerySet.restrict(user, "change"), for a pool that may have no row yet."""
    return any(role_grants(g.role, "poolaccess.change") and (
        g.scope_type == ScopeType.SYSTEM or (g.scope_type == ScopeType.CLUSTER and g.cluster_id == pool.cluster_id))
        for g in user_grants(actor))


def _access_snapshot(row: PoolAccess | None) -> dict[str, Any] | None:
    if row is None:
        return None
    values = snapshot(row)
    values["departments"] = sorted(row.departments.values_list("name", flat=True))
    values["projects"] = sorted(row.projects.values_list("name", flat=True))
    values["groups"] = sorted(row.groups.values_list("name", flat=True))
    return values


def pools_from_names(*, project: Any, names: list[str] | None) -> list[NodePool]:
    """The pools named, in order, of the project's cluster; none named: the project's priority list,
    then `default`. An unknown name is refused naming it."""
    names = [n.strip() for n in (names or []) if isinstance(n, str) and n.strip()]
    if not names:
        return selectors.default_pools(project)
    found = {p.name: p for p in NodePool.objects.filter(cluster_id=project.cluster_id, name__in=names)}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ValidationError({"pools": [f"No node pool named {', '.join(unknown)} in cluster "
                                         f"{project.cluster.name}."]})
    return [found[n] for n in names]
